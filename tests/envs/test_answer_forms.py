"""Right answers in the forms models write them (envs.answer_forms), scored through envs.reward.score_answer."""

import pytest

from envs.answer_forms import FORMS, form_meaning, reading, written_as
from envs.generation import generate_entry
from envs.reward import score_answer


def test_each_form_writes_the_gold_as_models_do():
    assert written_as("float_zero", "20") == "20.0" and written_as("float_zero", "2.5") is None
    assert written_as("name_prefix", "-7") == "x = -7" and written_as("name_prefix", "a b") is None
    assert written_as("thousands", "-1234567") == "-1,234,567" and written_as("thousands", "999") is None
    assert written_as("thousands", "37093940.057") == "37,093,940.057"
    assert written_as("dollars", "3/4") == "$3/4$" and written_as("boxed", "3/4") == "\\boxed{3/4}"
    assert written_as("line_end_spaces", "1 2\n3 4") == "1 2 \n3 4 \n" and written_as("line_end_spaces", "12") is None
    assert written_as("case", "0x5afb") == "0X5AFB" and written_as("case", "True") == "TRUE" and written_as("case", "AB") == "ab"
    assert written_as("full_stop", "Bob is a knave") == "Bob is a knave." and written_as("full_stop", "5 + 4 + 3") is None


@pytest.mark.parametrize("answer, gold, read", [
    ("20.0", "20", "20"), ("1,234", "1234", "1234"), ("$\\boxed{7}$", "7", "7"), ("\\(12\\)", "12", "12"),
    ("1 2 \n3 4 \n", "1 2\n3 4", "1 2\n3 4"), ("TRUE", "True", "True"), ("0X5AFB", "0x5afb", "0x5afb"),
    ("i = 15", "15", "15"), ("x = 1,234.0", "1234", "1234"), ("x = y", "5", "x = y"),
    ("20.5", "20", "20.5"), ("1,23", "123", "1,23"), ("-20.0", "20", "-20"), ("[1.0]", "[1]", "[1.0]"),
])
def test_a_reading_changes_the_form_and_never_the_value(answer, gold, read):
    assert reading("course_schedule" if gold == "True" else "bitwise_arithmetic", answer, gold) == read


def test_letter_case_is_read_only_where_the_task_does_not_depend_on_it():
    assert form_meaning("bitwise_arithmetic", "case")[0] and not form_meaning("word_sorting", "case")[0]
    assert reading("word_sorting", "SUCH, action", "such, action") == "SUCH, action"  # ASCII order: case counts
    assert all(form_meaning("chain_sum", form)[0] for form in FORMS if form != "case")


@pytest.mark.parametrize("task, answer", [
    ("chain_sum", "{gold}.0"), ("basic_arithmetic", "$\\boxed{{{gold}}}$"), ("base_conversion", "{gold_upper}"),
    ("binary_matrix", "{gold_spaced}"), ("course_schedule", "{gold_upper}"),
])
def test_right_answers_in_models_forms_get_full_marks_with_the_reading_named(task, answer):
    entry = generate_entry(task, {"min_terms": 2, "max_terms": 2} if task == "chain_sum" else {}, "validation", 0, 3)
    gold = str(entry["answer"])
    written = answer.format(gold=gold, gold_upper=gold.upper(), gold_spaced=gold.replace("\n", " \n") + " \n")
    config = {"min_terms": 2, "max_terms": 2} if task == "chain_sum" else {}
    assert score_answer(task, written, entry, config)[0] == 1.0, written


def test_the_reason_names_what_was_read_when_the_scorer_took_only_the_reading():
    entry = generate_entry("course_schedule", {}, "validation", 0, 0)
    assert score_answer("course_schedule", str(entry["answer"]).upper(), entry, {}) == (
        1.0, f"read as {entry['answer']!r} (envs.answer_forms: the same answer in another form)")


def test_a_reading_gives_no_wrong_answer_full_marks():
    entry = generate_entry("chain_sum", {}, "validation", 0, 0)
    gold = int(entry["answer"])
    for wrong in (f"{gold + 1}.0", f"${-gold}$", f"{gold * 10:,}", f"\\boxed{{{gold}0}}"):
        assert score_answer("chain_sum", wrong, entry, {})[0] < 1.0, wrong
