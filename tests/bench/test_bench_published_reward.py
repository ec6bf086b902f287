"""bench/bench_published_reward.py on hand-made published records (Reasoning Gym's own items at the suite's seed, real
scorers): both readings counted, each disagreement given its cause, forms found, a rerun served from its rows."""

import json

import pytest
import reasoning_gym

from bench.bench_published_reward import disagreement_table, form_hits, forms_table, merge, run

TASKS = {"arithmetic/basic_arithmetic", "algorithmic/game_of_life_halting"}


def published_file(root, key: str, records: list[tuple[str, list[str]]]) -> None:
    """One task file of a made-up model, in the published format: question and completions per item."""
    folder = root / "reasoninggym-paper-experiments" / "zero-shot" / "easy" / "lab_model_20250101_000000"
    path = folder / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    results = [{"question": question, "completions": [{"full_model_response": text} for text in texts]}
               for question, texts in records]
    path.write_text(json.dumps({"results": results, "average_mean_score": 0.5}))


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Three items of the easy suite (seed 45) and one question it does not draw, answered as models answered."""
    root = tmp_path_factory.mktemp("published")
    arithmetic = reasoning_gym.create_dataset("basic_arithmetic", seed=45, size=50)[0]
    halting = reasoning_gym.create_dataset("game_of_life_halting", seed=45, size=50)[0]
    assert (arithmetic["answer"], halting["answer"]) == ("8860", "True")
    published_file(root, "arithmetic/basic_arithmetic", [
        (arithmetic["question"], ["<answer>8860</answer>",  # right, both readings agree
                                  "The <answer> tag comes last.\n<answer>8860</answer>",  # RG reads from the first tag
                                  "<answer>8,860</answer>"]),  # right, with a thousands separator
        ("Calculate 1 + 1.", ["<answer>2</answer>"])])  # a question this Reasoning Gym does not draw: left out
    published_file(root, "algorithmic/game_of_life_halting", [(halting["question"], ["<answer>False</answer>"])])
    return root


@pytest.fixture(scope="module")
def tasks(published, tmp_path_factory):
    rows = run(published, ["easy"], TASKS, tmp_path_factory.mktemp("work"), processes=1)
    return {task["task"]: task for task in merge(rows)}


def test_disagreements_are_counted_with_their_cause(tasks):
    arithmetic = tasks["arithmetic/basic_arithmetic"]
    assert (arithmetic["completions"], arithmetic["left_out"], arithmetic["rg_only"]) == (3, 1, 0)
    # the prose's "<answer>" starts Reasoning Gym's reading, so it reads "tag comes last.\n<answer>8860": a different
    # answer string, scored 0; the project reads the last complete block
    assert arithmetic["causes"]["answer extraction"] == {"project_only": 1, "rg_only": 0}
    example = arithmetic["examples"]["answer extraction"][0]
    assert example["project_answer"] == "'8860'" and example["rg_answer"].startswith("'tag comes last.")
    # '8,860': a right answer in another form is either read by the project's answer-form rule or counted as a form
    # the project misses; never lost
    form_read = arithmetic["causes"].get("answer form", {}).get("project_only", 0)
    form_missed = arithmetic["forms"].get("thousands separators", {}).get("count", 0)
    assert form_read + form_missed == 1
    assert arithmetic["agree"] == 3 - 1 - form_read

    halting = tasks["algorithmic/game_of_life_halting"]  # Reasoning Gym's scorer gives any non-empty answer 1.0
    assert (halting["completions"], halting["agree"], halting["project_only"], halting["rg_only"]) == (1, 0, 0, 1)
    assert halting["causes"] == {"repaired scorer": {"project_only": 0, "rg_only": 1}}
    assert halting["examples"]["repaired scorer"][0]["rg_answer"] == "'False'"


def test_tables_name_the_tasks_that_disagree(tasks):
    table = disagreement_table(list(tasks.values()))
    assert "| easy | algorithmic/game_of_life_halting | 1 | 0 | 0 | 1 | 0/1 |" in table
    assert "| easy | arithmetic/basic_arithmetic | 3 |" in table
    forms_table(list(tasks.values()))  # renders with or without a form row


def test_a_rerun_scores_nothing_again(published, tmp_path, capsys):
    first = run(published, ["easy"], TASKS, tmp_path, processes=1)
    again = run(published, ["easy"], TASKS, tmp_path, processes=1)
    assert "0 published files to score (2 already in" in capsys.readouterr().out
    assert sorted(map(json.dumps, first)) == sorted(map(json.dumps, again))


def test_a_form_counts_only_when_the_plain_answer_is_the_gold():
    from evaluation.published_scores import suite_items

    options, by_task, _ = suite_items("easy", {"arithmetic/basic_arithmetic"})
    item = by_task["arithmetic/basic_arithmetic"][reasoning_gym.create_dataset("basic_arithmetic", seed=45,
                                                                               size=50)[0]["question"]][0]
    assert ("whole number as N.0", "scorer") in form_hits("8860.0", item, options)
    assert ("$...$ or \\(...\\) wrapper", "scorer") in form_hits("$8860$", item, options)
    assert ("x = 5 prefix", "scorer") in form_hits("x = 8860", item, options)
    assert form_hits("8861.0", item, options) == [] and form_hits("8860", item, options) == []


def test_a_form_the_reward_names_is_the_cause_before_a_repaired_scorer():
    """A full-marks result that carries a reason was read in another form (a right answer as written carries none)."""
    from bench.bench_published_reward import cause_of

    read = {"acc": 1.0, "answer_found": 1.0, "pred": "sorts of dishes.", "reason": "read as 'sorts of dishes'"}
    assert cause_of("letter_jumble", "sorts of dishes.", read) == "answer form"
    assert cause_of("letter_jumble", "sorts of dishes.", dict(read, reason="")) == "repaired scorer"
    assert cause_of("basic_arithmetic", "tag.\n<answer>8860", dict(read, pred="8860", reason="")) == "answer extraction"
    assert cause_of("basic_arithmetic", "8860", dict(read, pred="8860", reason="")) == "other"
    # a repair built on Reasoning Gym's scorer with the item's config counts as one too
    assert cause_of("time_intervals", "46D", dict(read, pred="46D", reason="")) == "repaired scorer"
