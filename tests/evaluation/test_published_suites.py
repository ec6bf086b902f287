"""The suites of Reasoning Gym's published zero-shot evaluations (configs/eval/rg_zero_shot_{easy,hard}.yaml): their
items are Reasoning Gym's own at seed 45, the very questions the published runs asked (hashes taken from
open-thought/reasoning-gym-eval's files: tests/evaluation/data/published_questions.json), not the project's
evaluation split; and Reasoning Gym's own eval/yaml schema runs unchanged on those items.

The eval/yaml files here are written in that schema by the test (its keys as its eval_config.py defines them), not
copied from Reasoning Gym.
"""

import hashlib
import json
import logging
from pathlib import Path

import pytest
import yaml

from evaluation.config import ConfigError, load_config
from evaluation.evaluate_model import main
from evaluation.runner import fingerprint
from evaluation.suite import build_suite, task_items
from tests.evaluation.test_reference_eval import changed_yaml

REPO = Path(__file__).resolve().parents[2]
PUBLISHED = json.loads((Path(__file__).parent / "data" / "published_questions.json").read_text())


def question_hash(question: str) -> str:
    return hashlib.sha256(question.encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", ["easy", "hard"])
def test_the_shipped_suites_draw_the_published_questions(name):
    cfg = load_config(str(REPO / "configs" / "eval" / f"rg_zero_shot_{name}.yaml"), ["model.path=unused"])
    assert cfg.items == "published" and cfg.sampling.n == (3 if name == "easy" else 1)
    assert cfg.system_prompt == "default" and (cfg.sampling.temperature, cfg.sampling.top_p) == (0.6, 0.95)
    assert sum(len(c.tasks) for c in cfg.categories) == (101 if name == "easy" else 100)
    tasks = {f"{c.name}/{t.key}": (c.name, t) for c in cfg.categories for t in c.tasks}
    for key, hashes in PUBLISHED["sets"][name].items():
        group, task = tasks[key]
        assert (task.size, task.seed) == (50, 45)
        items = task_items(group, task, "x", published=True)
        assert [question_hash(item.entry["question"]) for item in items] == hashes, key
        # and not the project's evaluation split at the same seed
        assert question_hash(task_items(group, task, "x")[0].entry["question"]) != hashes[0]


def rg_eval_yaml(tmp_path: Path, **changes) -> Path:
    """A config in Reasoning Gym's eval/yaml schema: two tasks, one with its own size and parameters."""
    raw = {"model": "openai/o3-mini", "provider": "OpenAI", "output_dir": str(tmp_path / "results"),
           "max_concurrent": 4, "default_size": 3, "default_seed": 45, "completions_per_prompt": 2, "max_tokens": 24,
           "categories": [{"category": "arithmetic", "datasets": [
               {"dataset": "basic_arithmetic"},
               {"dataset": "chain_sum", "size": 2, "params": {"min_terms": 2, "max_terms": 3}}]}]}
    return changed_yaml(tmp_path / "o3-mini.yaml", raw, changes)


def test_reasoning_gyms_eval_yaml_runs_unchanged_on_its_own_items(tmp_path):
    cfg = load_config(str(rg_eval_yaml(tmp_path)), ["model.path=unused"])
    assert cfg.items == "published" and cfg.system_prompt == "default"  # their default: SYSTEM_PROMPTS["default"]
    assert (cfg.sampling.n, cfg.sampling.max_tokens, cfg.sampling.temperature, cfg.sampling.top_p) == (2, 24, 0.6, 0.95)
    assert cfg.pass_k == [1, 2] and cfg.model.max_concurrency == 4
    [arith] = cfg.categories
    assert [(t.task, t.size, t.seed, t.config) for t in arith.tasks] == [
        ("basic_arithmetic", 3, 45, {}), ("chain_sum", 2, 45, {"min_terms": 2, "max_terms": 3})]
    import reasoning_gym

    items = build_suite(cfg)
    expected = reasoning_gym.create_dataset("chain_sum", seed=45, size=2, min_terms=2, max_terms=3)
    assert [i.entry["question"] for i in items if i.task == "chain_sum"] == [expected[0]["question"],
                                                                             expected[1]["question"]]
    lines = cfg.reference.console_lines()
    assert lines[0] == "Reasoning Gym eval/yaml config, translated:"
    assert any("ignored 'model: openai/o3-mini'" in line and "--model" in line for line in lines)
    assert any("ignored 'provider: OpenAI'" in line for line in lines)
    assert any("temperature unset -> 0.6" in line for line in lines)


def test_its_mistakes_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'completions_per_promt'.*did you mean completions_per_prompt"):
        load_config(str(rg_eval_yaml(tmp_path, completions_per_promt=3)), ["model.path=unused"])
    with pytest.raises(ConfigError, match=r"'default_seed' is unset.*45"):
        load_config(str(rg_eval_yaml(tmp_path, default_seed=None)), ["model.path=unused"])


def test_published_items_are_a_suite_setting_of_their_own(tmp_path):
    suite = {"model": {"path": "unused"}, "suite": {"size": 2, "seed": 45, "categories": {
        "arithmetic": {"tasks": {"chain_sum": {}}}}}}
    (tmp_path / "ours.yaml").write_text(yaml.safe_dump(suite))
    ours = load_config(str(tmp_path / "ours.yaml"))
    published = load_config(str(tmp_path / "ours.yaml"), ["suite.items=published"])
    assert ours.items == "evaluation" and published.items == "published"
    assert fingerprint(ours)["hash"] != fingerprint(published)["hash"]  # a cached result is of its own items
    with pytest.raises(ConfigError, match=r"'suite.items' is 'paper'; use evaluation .* or published"):
        load_config(str(tmp_path / "ours.yaml"), ["suite.items=paper"])
    suite["suite"]["composites"] = {"mixed": {"tasks": {"chain_sum": {}}}}
    (tmp_path / "ours.yaml").write_text(yaml.safe_dump(suite))
    with pytest.raises(ConfigError, match="published items are a task's own dataset"):
        load_config(str(tmp_path / "ours.yaml"), ["suite.items=published"])


def test_a_task_this_reasoning_gym_cannot_draw_is_left_out_by_name(tmp_path, monkeypatch, caplog):
    import reasoning_gym

    real = reasoning_gym.create_dataset

    def changed_generator(name, **kwargs):
        if name == "chain_sum":
            raise ValueError("Failed to generate valid puzzle after trying 100 different boards")
        return real(name, **kwargs)

    monkeypatch.setattr(reasoning_gym, "create_dataset", changed_generator)
    cfg = load_config(str(rg_eval_yaml(tmp_path)), ["model.path=unused"])
    with caplog.at_level(logging.WARNING):
        items = build_suite(cfg)
    assert {item.task for item in items} == {"basic_arithmetic"} and len(items) == 3
    assert "arithmetic/chain_sum left out: this Reasoning Gym cannot draw its published items (ValueError: " \
           "Failed to generate" in caplog.text


def test_the_console_says_whose_items_they_are(tiny_model_dir, tmp_path, capsys):
    code = main(["--config", str(rg_eval_yaml(tmp_path)), "--model", str(tiny_model_dir), "--backend", "hf",
                 "--output", str(tmp_path / "run"), "sampling.max_tokens=8"])
    assert code == 0
    out = capsys.readouterr().out
    assert "items: Reasoning Gym's published ones" in out and "not this project's evaluation split" in out
    records = [json.loads(line) for line in (tmp_path / "run" / "generations.jsonl").read_text().splitlines()]
    assert len(records) == (3 + 2) * 2


RUNS = Path(__file__).parent / "data" / "published_runs"  # a few published results, trimmed (NOTICE)
FIXTURE_TASKS = {"arithmetic/basic_arithmetic", "algorithmic/spell_backward", "games/countdown"}


def test_rescoring_published_completions_reproduces_the_committed_table():
    """The committed table's numbers for the fixture's items are what the script computes from those completions;
    spell_backward's published questions are no longer drawn (its generator changed): left out and counted."""
    from evaluation.published_scores import load, rescore_set

    committed = load()["sets"]["easy"]
    rescored = rescore_set(RUNS, "easy", only=FIXTURE_TASKS)
    assert sorted(rescored["models"]) == ["meta-llama_llama-3.3-70b-instruct", "openai_o3-mini"]
    for model, tasks in rescored["models"].items():
        for key, got in tasks.items():
            matched = {pos: acc for pos, acc in enumerate(got["accuracy"]) if acc is not None}
            want = committed["models"][model][key]
            assert {pos: want["accuracy"][pos] for pos in matched} == matched, (model, key)
            assert rescored["hashes"][key] == committed["hashes"][key]
            if key == "algorithmic/spell_backward":
                assert matched == {} and got["left_out"] == 2 and want["left_out"] == 50
            else:
                assert len(matched) == {"arithmetic/basic_arithmetic": 4, "games/countdown": 3}[key]
                assert got["left_out"] == 0
    # the hashes are the suite's questions, which test_the_shipped_suites_draw_the_published_questions pins
    key = "arithmetic/basic_arithmetic"
    assert committed["hashes"][key] == PUBLISHED["sets"]["easy"][key]


def test_the_committed_table_holds_every_published_model_and_says_where_it_came_from():
    from evaluation.published_scores import load

    from importlib.metadata import version

    data = load()
    assert "open-thought/reasoning-gym-eval" in data["about"] and "Apache" in data["about"]
    # made with the Reasoning Gym installed (its __version__ says 0.1.19 in 0.1.25: the dist's version is read);
    # a lock that moves Reasoning Gym must rerun python -m evaluation.published_scores
    assert data["reasoning_gym"] == version("reasoning-gym")
    for name, tasks in (("easy", 101), ("hard", 99)):  # hard: knight_swap cannot be drawn at its parameters
        table = data["sets"][name]
        assert len(table["models"]) == 10 and len(table["hashes"]) == tasks
        assert all(None not in hashes for hashes in table["hashes"].values())  # every position, repeats too
        for model, scores in table["models"].items():
            assert len(scores) >= tasks - 1, (name, model)  # a published file or two is missing from the snapshot
            assert all(0 <= a <= 1 for s in scores.values() for a in s["accuracy"] if a is not None)


def test_a_question_drawn_at_two_places_is_scored_at_each(tmp_path):
    """products draws "8 * 7" at positions 7 and 28: the first published result asking it is position 7's, the
    second position 28's (the published files list a task's items in order)."""
    import reasoning_gym

    from evaluation.published_scores import rescore_set

    folder = tmp_path / "reasoninggym-paper-experiments" / "zero-shot" / "easy" / "lab_model_20250101_000000"
    (folder / "arithmetic").mkdir(parents=True)
    items = reasoning_gym.create_dataset("products", seed=45, size=50)
    assert items[7]["question"] == items[28]["question"] and items[7]["answer"] == "56"
    results = [{"question": items[i]["question"], "completions": [{"full_model_response": f"<answer>{said}</answer>"}]}
               for i, said in ((7, 56), (28, 55))]
    (folder / "arithmetic" / "products.json").write_text(json.dumps({"results": results, "average_mean_score": 0.5}))
    scored = rescore_set(tmp_path, "easy", only={"arithmetic/products"})
    accuracy = scored["models"]["lab_model"]["arithmetic/products"]["accuracy"]
    assert (accuracy[7], accuracy[28], sum(a is not None for a in accuracy)) == (1.0, 0.0, 2)
    hashes = scored["hashes"]["arithmetic/products"]
    assert None not in hashes and hashes[7] == hashes[28]
