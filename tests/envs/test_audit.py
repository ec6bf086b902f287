"""The scorer audit (envs.audit) and, through it, every Reasoning Gym task's scorer against the project's table."""

import re

import pytest

from envs import audit
from envs.audit import audit_task, main, markdown_table, near_misses, same_answer
from envs.scorers import ACCEPTED_LENIENCIES, ANSWER_SHAPES, REPAIRED_SCORERS, scorer_for
from envs.tasks import all_tasks

NO_GOLD = {"boxnet", "rush_hour"}  # several right answers and no example answer in the entry


def test_near_misses_differ_from_the_gold_in_value():
    assert near_misses("ytilaidola") == {"appended": "ytilaidolaxyz", "twice": "ytilaidola ytilaidola",
                                         "dropped_last": "ytilaidol", "case": "YTILAIDOLA",
                                         "whitespace": "ytila idola", "empty": ""}
    assert "dropped_last" not in near_misses("-100.0") and "dropped_last" not in near_misses("3.14")  # same, rounded
    assert near_misses("3.5")["dropped_last"] == "3." and near_misses("Bob is a knave.")["dropped_last"].endswith("knav.")
    assert "whitespace" not in near_misses("['1', '2']") and "case" not in near_misses("12")
    assert same_answer("12.0", "12.00") and same_answer("[1, 2]", "[1,2]") and not same_answer("12", "1 2")


def run_main(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, [line for line in out.splitlines() if line.startswith("[audit]")], err


def test_the_quickstart_mix_passes_in_one_line_a_task(capsys):
    code, lines, err = run_main(capsys, "--mix", "quickstart")
    assert code == 0 and [line.split(":")[0] for line in lines] == ["[audit] chain_sum", "[audit] basic_arithmetic"]
    assert all("gold 1 on 24/24; near misses: none scores as right" in line for line in lines) and "passed" in err


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
def test_every_tasks_scorer_gives_full_marks_to_the_gold_and_to_no_near_miss_but_the_documented(task, doc_rows):
    """Reasoning Gym's default config, the audit's items: the gold scores 1 on every item; the near misses that score
    as right are among envs.scorers.ACCEPTED_LENIENCIES' (another is a hole); docs/task-stream.md's row, with its
    counts, is what `python -m envs.audit --all-tasks --markdown` prints, so any change of a scorer's results fails."""
    found = audit_task(task, task, {})
    if task in NO_GOLD:
        assert found.items == 0 and found.no_gold > 0
    else:
        assert found.items > 0 and found.gold_missed == []
    accepted = {case for case, count in found.accepted.items() if count}
    assert found.holes == [] and accepted <= set(ACCEPTED_LENIENCIES.get(task, {})), (task, dict(found.accepted))
    assert doc_rows.get(task) == markdown_table([found]).splitlines()[-1], "rerun: python -m envs.audit --all-tasks --markdown"


def test_the_documented_table_lists_every_task_once(doc_rows):
    assert sorted(doc_rows) == all_tasks() and set(ACCEPTED_LENIENCIES) <= set(all_tasks())
    assert audit.SLOW <= set(all_tasks())


@pytest.mark.parametrize("task", sorted(ANSWER_SHAPES))
def test_strict_answers_reject_no_gold_and_close_what_they_name(task):
    """With strict_answers every gold still scores 1, and the leniencies the table says strict_answers closes are
    gone (the table's other reasons stand)."""
    loose, strict = audit_task(task, task, {}, items=48), audit_task(task, task, {}, items=48, strict=True)
    assert strict.items == 48 and strict.gold_missed == []
    closes = {case for case, why in ACCEPTED_LENIENCIES[task].items() if "strict_answers closes it" in why}
    assert closes and all(loose.accepted[case] for case in closes) and not any(strict.accepted[c] for c in closes)
