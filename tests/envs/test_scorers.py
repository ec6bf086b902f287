"""The project's repairs of Reasoning Gym's scorers (envs.scorers): each pinned against what Reasoning Gym's scorer
did with the same answer, on real items."""

import pytest

from envs.generation import generate_entry
from envs.reward import rg_score
from envs.scorers import _rg_scorer, is_repaired


def entry_of(task, position=0, config=None, where=lambda entry: True):
    """The first validation item of `task` from `position` on that `where` accepts."""
    for p in range(position, position + 200):
        entry = generate_entry(task, config or {}, "validation", 0, p)
        if where(entry):
            return entry
    raise AssertionError(f"no such {task} item")


def test_puzzle24_takes_only_the_puzzles_own_numbers_and_exactly_24():
    entry = entry_of("puzzle24", where=lambda e: sorted(e["metadata"]["numbers"]) != [2, 6, 7, 9])
    other = "2 + 9 + 6 + 7"
    assert _rg_scorer("puzzle24")(other, entry) == 1.0 and rg_score("puzzle24", other, entry)[0] < 1.0
    assert rg_score("puzzle24", entry["metadata"]["example_answer"] if "example_answer" in entry["metadata"]
                    else entry["answer"], entry)[0] == 1.0
    numbers = {"metadata": {"numbers": [3, 3, 8, 8]}}  # 8 / (3 - 8/3) = 24; 3*8 + 8/3 - 3 ... = 23.67 is not
    assert rg_score("puzzle24", "8 / (3 - 8 / 3)", numbers)[0] == 1.0
    assert rg_score("puzzle24", "3 * 8 + 8 / 3 - 3", numbers)[0] < 1.0  # 23.67: no truncation to 24


def test_gsm_symbolic_reads_the_sign():
    entry = entry_of("gsm_symbolic")
    gold = int(entry["answer"])
    assert _rg_scorer("gsm_symbolic")(str(-gold), entry) == 1.0  # Reasoning Gym: -63 for 63
    assert rg_score("gsm_symbolic", str(-gold), entry)[0] < 1.0 and rg_score("gsm_symbolic", str(gold), entry)[0] == 1
    negative = dict(entry, answer="-5")
    assert _rg_scorer("gsm_symbolic")("-5", negative) < 1.0 and rg_score("gsm_symbolic", "-5", negative)[0] == 1.0
    assert rg_score("gsm_symbolic", f"{gold}xyz", entry)[0] < 1.0


def test_word_sorting_and_game_of_life_refuse_the_right_answer_with_more_after_it():
    words = entry_of("word_sorting")
    longer = words["answer"] + ", " + words["answer"].split(", ")[0]
    assert _rg_scorer("word_sorting")(longer, words) == 1.0 and rg_score("word_sorting", longer, words)[0] < 1.0
    life = entry_of("game_of_life")
    grid = life["answer"]
    taller = grid[:-1] + "," + grid[1:grid.index("]") + 1] + "]"
    assert _rg_scorer("game_of_life")(taller, life) == 1.0 and rg_score("game_of_life", taller, life)[0] < 1.0
    assert rg_score("game_of_life", grid.replace(",", ", "), life)[0] == 1.0  # spacing is the same grid


def test_advanced_geometry_takes_one_point_and_time_intervals_a_day_count_in_days():
    point = entry_of("advanced_geometry", where=lambda e: e["answer"].startswith("("))
    two = point["answer"] + ", (1, 2)"
    assert _rg_scorer("advanced_geometry")(two, point) == 1.0 and rg_score("advanced_geometry", two, point)[0] < 1
    days = entry_of("time_intervals", where=lambda e: e["metadata"]["task_type"] == "date")
    hours = days["answer"].split()[0] + " hours"
    assert _rg_scorer("time_intervals")(hours, days) == 1.0 and rg_score("time_intervals", hours, days)[0] == 0.0
    assert rg_score("time_intervals", days["answer"].split()[0], days)[0] == 1.0  # the number alone, as RG


def test_codeio_takes_only_the_golds_json_value_not_one_of_another_kind():
    """Reasoning Gym's tree distance reads values as text: a number written as a string, true for 1 and {} for []
    (the audit's constant `{}` on an item whose output is an empty list) all scored 1."""
    import json

    entry = entry_of("codeio", where=lambda e: any(type(v) in (int, float) for v in json.loads(e["answer"]).values()))
    gold = json.loads(entry["answer"])
    key = next(k for k, v in gold.items() if type(v) in (int, float))
    for wrong in ({**gold, key: str(gold[key])}, {**gold, key: True} if gold[key] == 1 else {**gold, key: [gold[key]]}):
        text = json.dumps(wrong)
        assert rg_score("codeio", text, entry)[0] < 1.0, text
    as_text = json.dumps({**gold, key: str(gold[key])})
    assert _rg_scorer("codeio")(as_text, entry) == 1.0  # what was repaired
    empty = dict(entry, answer="[]")
    assert _rg_scorer("codeio")("{}", empty) == 1.0 and rg_score("codeio", "{}", empty)[0] < 1.0
    assert rg_score("codeio", json.dumps(gold, indent=2), entry)[0] == 1.0  # spacing is the same value
    assert rg_score("codeio", entry["answer"], entry)[0] == 1.0


@pytest.mark.parametrize("task", ["puzzle24", "gsm_symbolic", "word_sorting", "game_of_life", "advanced_geometry",
                                  "time_intervals", "codeio"])
def test_the_repaired_tasks_are_named_repaired(task):
    assert is_repaired(task)
