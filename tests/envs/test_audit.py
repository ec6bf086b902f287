"""The scorer audit (envs.audit) and, through it, every Reasoning Gym task's scorer against the project's table."""

import re

import pytest

from envs import audit
from envs.audit import audit_task, main, markdown_table
from envs.scorers import ACCEPTED_LENIENCIES, ANSWER_SHAPES, REPAIRED_SCORERS, scorer_for
from envs.tasks import all_tasks

NO_GOLD = {"boxnet", "rush_hour"}  # several right answers and no example answer in the entry


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, [line for line in out.splitlines() if line.startswith("[audit]")], err


def test_the_quickstart_mix_passes_in_one_line_a_task(capsys):
    code, lines, err = run_main(capsys, "--mix", "quickstart")
    assert code == 0 and [line.split(":")[0] for line in lines] == ["[audit] chain_sum", "[audit] basic_arithmetic"]
    assert all(re.search(r"gold 1 on 24/24; prior 0\.\d\d; wrong answers: none scores as right", line) for line in lines)
    assert all("forms: float_zero 24/24; name_prefix 24/24" in line for line in lines) and "passed" in err


def test_puzzle24_without_its_repair_gives_one_expression_full_marks_on_other_puzzles(capsys, monkeypatch):
    """Reasoning Gym's puzzle24 scorer checks the value, the count of numbers and their range, never that they are
    the puzzle's: another puzzle's expression scores 1, and the audit finds it with no example to go on."""
    assert audit_task("puzzle24", "puzzle24", {}, items=4).holes == []
    monkeypatch.delitem(REPAIRED_SCORERS, "puzzle24")
    scorer_for.cache_clear()
    try:
        unrepaired = audit_task("puzzle24", "puzzle24", {}, items=4)
    finally:
        scorer_for.cache_clear()
    assert {"cross_item", "constant"} <= set(unrepaired.holes) and unrepaired.verified["cross_item"] == 0


def test_another_items_answer_that_solves_this_item_is_checked_not_trusted():
    """graph_color: a colouring of another graph can colour this one too; envs.verifiers checks each from the edges."""
    found = audit_task("graph_color", "graph_color", {}, items=12)
    assert found.accepted["cross_item"] > 0 and found.verified["cross_item"] == found.accepted["cross_item"]
    assert found.holes == [] and "solve the item: envs.verifiers" in found.line()


def test_a_right_answer_in_another_form_that_scores_0_fails_the_audit(monkeypatch):
    """Without envs.answer_forms' reading, Reasoning Gym's course_schedule takes True and never TRUE."""
    import envs.reward

    assert audit_task("course_schedule", "course_schedule", {}, items=6).form_problems == []
    monkeypatch.setattr(envs.reward, "reading", lambda task, answer, gold: answer.strip())
    found = audit_task("course_schedule", "course_schedule", {}, items=6)
    assert found.form_problems == ["dollars", "boxed", "case"] and "case 0/6 MISSED: the same answer scores 0" in found.line()


def test_a_scorer_that_gives_a_wrong_answer_full_marks_fails_the_audit(capsys, monkeypatch):
    """Without the project's repair, number_sorting takes every number within 1 of the right one: -58. for -58.3."""
    monkeypatch.delitem(REPAIRED_SCORERS, "number_sorting")
    scorer_for.cache_clear()
    try:
        code, lines, err = run_main(capsys, "--tasks", "number_sorting")
    finally:
        scorer_for.cache_clear()
    assert code == 1 and re.search(r"dropped_last \d+/\d+ HOLE: a wrong answer scores as right", lines[0])
    assert "Reasoning Gym's scorer" in lines[0] and "FAILED" in err


def test_prompts_longer_than_the_limit_name_the_task_and_the_value(capsys, tiny_model_dir):
    code, lines, _ = run_main(capsys, "--tasks", "number_sorting", "--items", "3", "--model", str(tiny_model_dir),
                              "--max-prompt-length", "64")
    tokens = int(re.search(r"reach (\d+) tokens", lines[0]).group(1))
    assert code == 1 and f"set data.max_prompt_length={tokens} or more" in lines[0] and tokens > 64
    assert run_main(capsys, "--tasks", "number_sorting", "--items", "3", "--model", str(tiny_model_dir),
                    "--max-prompt-length", str(tokens))[0] == 0


def test_loose_audits_the_leading_value_reading_that_strict_answers_closes(capsys):
    code, lines, err = run_main(capsys, "--tasks", "gsm_symbolic", "--items", "6", "--loose")
    assert code == 0 and "twice 6/6 accepted: only the first number is read" in lines[0] and "strict_answers=false" in err
    code, lines, _ = run_main(capsys, "--tasks", "gsm_symbolic", "--items", "6")
    assert code == 0 and "wrong answers: none scores as right" in lines[0]


def test_bad_input_names_what_to_fix(capsys, tmp_path):
    code, _, err = run_main(capsys, "--tasks", "number_sortin")
    assert code == 2 and "did you mean 'number_sorting'" in err
    code, _, err = run_main(capsys, "--mix", "no_such_mix")
    assert code == 2 and "no_such_mix" in err and "quickstart" in err
    code, _, err = run_main(capsys, "--tasks", "chain_sum", "--model", str(tmp_path))
    assert code == 2 and f"--model {tmp_path}: cannot load its tokenizer" in err


def documented_rows() -> dict[str, str]:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "task-stream.md").read_text()
    table = text.split("<!-- audit:begin -->")[1].split("<!-- audit:end -->")[0]
    return {line.split("|")[1].strip(): line for line in table.strip().splitlines()[2:]}


@pytest.fixture(scope="module")
def doc_rows():
    return documented_rows()


@pytest.mark.slow  # ~2 min over all tasks: marked so that make test hands this file out first
@pytest.mark.parametrize("task", all_tasks())
def test_every_tasks_scorer_gives_full_marks_to_the_gold_and_its_forms_and_to_no_wrong_answer(task, doc_rows):
    """Reasoning Gym's default config, the audit's items: the gold scores 1 on every item, and in every form the task
    reads as the same answer; no wrong answer (near miss, structural change, another item's answer, a constant) scores
    as right unless envs.verifiers confirms it solves the item or envs.scorers.ACCEPTED_LENIENCIES says why;
    docs/task-stream.md's row, with its counts, is what `python -m envs.audit --all-tasks --markdown` prints, so any
    change of a scorer's results fails, naming the task and the case."""
    found = audit_task(task, task, {})
    if task in NO_GOLD:
        assert found.items == 0 and found.no_gold > 0
    else:
        assert found.items > 0 and found.gold_missed == []
    unexplained = {case for case in found.accepted if found.unexplained(case)}
    assert found.holes == [] and unexplained <= set(ACCEPTED_LENIENCIES.get(task, {})), (task, dict(found.accepted))
    assert found.form_problems == [], (task, dict(found.forms_tried), dict(found.forms_full))
    assert doc_rows.get(task) == markdown_table([found]).splitlines()[-1], "rerun: python -m envs.audit --all-tasks --markdown"


def shipped_mix_configs() -> list[tuple[str, str, dict]]:
    """(mix:key, task, config) of every task the shipped mixes configure away from its default, once per config."""
    from pathlib import Path

    from envs.audit import mix_tasks
    from envs.generation import config_key

    found = {}
    for path in sorted((Path(__file__).resolve().parents[2] / "configs" / "mix").glob("*.yaml")):
        for key, task, config in mix_tasks(path):
            if config:
                found.setdefault((task, config_key(config)), (f"{path.stem}:{key}", task, config))
    return [found[pair] for pair in sorted(found)]


@pytest.mark.slow  # ~1 min over the 31 configured tasks (futoshiki's items half of it)
@pytest.mark.parametrize("key, task, config", shipped_mix_configs(), ids=lambda value: str(value)[:40])
def test_every_task_of_the_shipped_mixes_at_its_mix_config_has_no_hole(key, task, config):
    """The shipped mixes' own task configs (levels, sizes) pass the same audit as the defaults: the gold and its
    same-answer forms score 1, no wrong answer does unless verified or explained."""
    found = audit_task(key, task, config)
    assert found.gold_missed == [] and found.holes == [] and found.form_problems == [], found.line()


def test_the_documented_table_lists_every_task_once(doc_rows):
    assert sorted(doc_rows) == all_tasks() and set(ACCEPTED_LENIENCIES) <= set(all_tasks())
    assert audit.SLOW <= set(all_tasks())


@pytest.mark.parametrize("task", sorted(ANSWER_SHAPES))
def test_strict_answers_reject_no_gold_and_close_what_they_name(task):
    """With strict_answers (the default) every gold still scores 1, and the leniencies the table says strict_answers
    closes are gone (the table's other reasons stand); without it they are there."""
    loose, strict = audit_task(task, task, {}, items=48, strict=False), audit_task(task, task, {}, items=48)
    assert strict.items == 48 and strict.gold_missed == []
    closes = {case for case, why in ACCEPTED_LENIENCIES[task].items() if "strict_answers, on by default, closes it" in why}
    assert closes and all(loose.accepted[case] for case in closes) and not any(strict.accepted[c] for c in closes)
