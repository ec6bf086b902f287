"""Signs of a hole in the reward (envs/hole_signals.py): the loose equivalence of an answer and its gold, the reward's
`pred_is_gold`, and the per-task aggregation with its warnings."""

import pytest

from envs.generation import generate_entry
from envs.hole_signals import HoleReport, Scored, hole_reports, loose_form, loosely_same, pred_is_gold, shown
from envs.mix import load_mix
from envs.reward import RESULT_FIELDS, RewardOptions, score_response
from tests.conftest import MIXES


@pytest.mark.parametrize("answer, gold", [
    ("20.0", "20"), ("1,234", "1234"), ("$x$", "x"), ("Paris", "paris"), ("{1, 2, 3}", "{3, 1, 2}"),
    ("\\boxed{42}", "42"), ('"yes".', "yes"), ("  a   b ", "a b"), ("+5", "5"), ("0.50", ".5"), ("-0", "0"),
    ('["b", "a"]', "a, b"), ("10*(8 - 5) - 6", "(8-5)*10-6"), ("The answer is 7.", "the answer is 7"),
    ("1\u22122", "1-2"), ("", ""), ("TIPS,TINS,BINS", "tips, tins, bins"), ("['hello world', 'b']", "b, hello world"),
])
def test_the_same_answer_in_another_form_is_the_gold(answer, gold):
    assert loosely_same(answer, gold) and loosely_same(gold, answer)


@pytest.mark.parametrize("answer, gold", [
    ("-3", "3"), ("21", "20"), ("20.5", "20"), ("1 2 3 4", "1 2 3"), ("[1, 2]", "[1, 2, 2]"), ("x", "y"),
    ("5-3", "5 - -3"), ("1,234", "1, 234"), ("1e3", "100"), ("cat", "cats"), ("R' U", "R U"), ("3/4", "3/4/"),
])
def test_a_sign_another_number_or_an_element_more_is_not(answer, gold):
    assert not loosely_same(answer, gold) and not loosely_same(gold, answer)


def test_no_answer_is_never_the_gold():
    assert loose_form(None) is None and not loosely_same(None, "1") and not loosely_same("1", None)
    assert pred_is_gold(None, {"answer": "1"}) == 0.0 and pred_is_gold("1.0", {"answer": 1}) == 1.0
    assert pred_is_gold("2", {"answer": "1"}) == 0.0
    assert pred_is_gold("anything", {"answer": None}) is None  # several right answers: nothing to compare with
    assert loose_form("1e999999999") == "1e999999999"  # an exponent too large to write out stays short
    assert loose_form("-1.50") == "-1.5" and loose_form("0.0025") == "0.0025" and loose_form("120") == "120"
    assert not loosely_same("1" + "0" * 30 + "1", "1" + "0" * 31)  # long numbers compare exactly


def test_every_result_carries_pred_is_gold():
    """The reward's result (one key set for verl): 1.0 for the gold in another form, 0.0 for a wrong answer or none,
    None where the entry has several right answers."""
    assert "pred_is_gold" in RESULT_FIELDS
    entry = generate_entry("chain_sum", {}, "train", 0, 0)
    gold = entry["answer"]
    wrong = score_response(f"<answer>{int(gold) + 1}</answer>", entry)
    none = score_response("no answer here", entry)
    assert score_response(f"<answer>{gold}</answer>", entry)["pred_is_gold"] == 1.0
    assert wrong["pred_is_gold"] == 0.0 and none["pred_is_gold"] == 0.0
    several = score_response("<answer>R U</answer>", {**entry, "answer": None})
    assert several["pred_is_gold"] is None and set(several) == set(none)


def test_the_quickstarts_right_answers_are_its_golds():
    """The CPU quickstart (chain_sum, basic_arithmetic) must not warn in normal training: every answer its scorers
    give full marks, as the quickstart reads them (the last number), is the gold; a step of right answers, however
    many items share a gold, has no warning."""
    mix = load_mix(MIXES / "quickstart.yaml")
    options = RewardOptions(answer_fallback="last_number", partial_credit=True)
    rows = []
    for spec in mix.tasks:
        for position in range(24):
            entry = generate_entry(spec.task, spec.config, "train", 0, position)
            for text in (f"so it is {entry['answer']}", f"<answer>{entry['answer']}</answer>"):
                result = score_response(text, entry, task=spec.task, config=spec.config, options=options)
                assert result["acc"] == 1.0 and result["pred_is_gold"] == 1.0, (spec.key, entry["answer"], result)
                rows.append(Scored(spec.key, f"{position}", result["acc"], result["pred"], result["pred_is_gold"]))
    reports = hole_reports(rows)
    assert set(reports) == set(mix.keys) == {"chain_sum", "basic_arithmetic"}
    for report in reports.values():
        assert report.full_marks == 48 and report.full_marks_not_gold == 0.0 and report.warnings() == []
        assert report.answer_collapse <= 4 / 24  # items that share a gold count once


def rows(task, answers, gold_flags, items=None):
    """Full-mark rows: answer i on item items[i] (default: one item each), pred_is_gold from gold_flags."""
    items = items or [f"i{i}" for i in range(len(answers))]
    return [Scored(task, item, 1.0, answer, flag) for item, answer, flag in zip(items, answers, gold_flags)]


def test_full_marks_for_answers_that_are_not_the_gold_warn():
    step = rows("puzzle24", ["6*4*1*1"] * 7 + ["2*3*4*1", "1*1*4*6"] + ["8*3"], [0.0] * 9 + [1.0])
    step += [Scored("puzzle24", f"w{i}", 0.0, "5", 0.0) for i in range(6)]  # wrong answers count for nothing here
    report = hole_reports(step)["puzzle24"]
    assert (report.full_marks, report.judged, report.not_gold) == (10, 10, 9)
    assert report.full_marks_not_gold == pytest.approx(0.9)
    assert report.warnings()[0] == ('reward hole? puzzle24: 9 of 10 full marks are not the gold '
                                    '(most often "6*4*1*1", 8x)')
    # "1*1*4*6" is "6*4*1*1" reordered: one answer, on 8 of the 16 items, none of them its gold
    assert report.answer_collapse == pytest.approx(8 / 16)
    assert report.warnings()[1] == ('reward hole? puzzle24: one answer, "6*4*1*1", has full marks on 8 of 16 items '
                                    "whose golds differ")


def test_thresholds_few_full_marks_or_half_of_them_do_not_warn():
    three = hole_reports(rows("t", ["a", "b", "c"], [0.0] * 3))["t"]
    assert three.full_marks_not_gold == 1.0 and three.warnings() == []  # 3 < MIN_FULL_MARKS
    half = hole_reports(rows("t", ["a", "b", "c", "d"], [0.0, 0.0, 1.0, 1.0]))["t"]
    assert half.full_marks_not_gold == 0.5 and half.warnings() == []  # not most
    quiet = hole_reports([Scored("t", f"i{i}", 0.0, "x", 0.0) for i in range(8)])["t"]
    assert (quiet.full_marks_not_gold, quiet.answer_collapse, quiet.warnings()) == (0.0, 0.0, [])


def test_one_answer_right_on_items_that_share_its_gold_is_no_collapse():
    """letter_counting's gold is "1" on most items: "1" right on all of them counts as one gold, no hole."""
    step = rows("letters", ["1"] * 10 + ["2", "3"], [1.0] * 12)
    report = hole_reports(step)["letters"]
    assert report.answer_collapse == pytest.approx(1 / 12) and report.warnings() == []


def test_one_answer_across_items_with_several_right_answers_warns_without_a_gold():
    """Items whose entry answer is None (several right answers) are left out of full_marks_not_gold; one answer with
    full marks on most of them is the sign."""
    step = rows("rubiks_cube", ["R U R'"] * 5 + ["F"], [None] * 6, items=[f"i{i}" for i in range(6)])
    step += [Scored("rubiks_cube", "i0", 1.0, "r u r'", None), Scored("rubiks_cube", "i6", 0.0, "U", None)]
    report = hole_reports(step)["rubiks_cube"]
    assert report.judged == 0 and report.full_marks_not_gold == 0.0
    assert report.collapse_items == 5 and report.answer_collapse == pytest.approx(5 / 7)
    assert report.warnings() == ["reward hole? rubiks_cube: one answer, \"R U R'\", has full marks on 5 of 7 items "
                                 "whose golds differ"]


def test_the_answer_a_warning_names_is_shortened():
    assert shown("a  b\n c") == '"a b c"' and shown(None) == "(no answer)"
    assert shown("x" * 100) == '"' + "x" * 27 + '..."'
    report = HoleReport("t", items=4, full_marks=4, judged=4, not_gold=4, not_gold_answer="y" * 50, not_gold_count=4)
    assert report.warnings() == [f'reward hole? t: 4 of 4 full marks are not the gold (most often "{"y" * 27}...", 4x)']


def test_a_right_answer_built_another_way_is_the_gold_where_the_items_check_confirms_it():
    """puzzle24's entry holds one expression of several: another one with the puzzle's numbers is not a hole, one with
    other numbers is (envs.verifiers)."""
    entry = {"question": "q", "answer": "1 * 2 * 3 * 4", "metadata": {"source_dataset": "puzzle24",
                                                                      "numbers": [1, 2, 3, 4]}}
    assert pred_is_gold("(1 + 2 + 3) * 4", entry) == 1.0
    assert pred_is_gold("2 + 9 + 6 + 7", entry) == 0.0 and pred_is_gold("(1 + 2 + 3) * 5", entry) == 0.0
