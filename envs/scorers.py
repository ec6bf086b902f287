"""The scorer each task gets, and what we know of it: Reasoning Gym's own or the project's repair, the near misses it
accepts and why that is harmless, and the answer shapes that `strict_answers` enforces.

Full marks (1.0) mean a right answer: `envs.reward.rg_score` counts an answer as right only when its scorer returns
exactly 1, so a repair's partial credit must stay below 1 for every wrong answer. envs.audit tries every task's
scorer with its gold answers and near misses and checks the results against this table; tests/envs/test_audit.py
runs it over every task, so a Reasoning Gym upgrade that changes a scorer fails there, naming the task and the case.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable

import reasoning_gym


def _exact_boolean(answer: str, entry: dict[str, Any]) -> float:
    return 1.0 if answer.strip().lower() == str(entry["answer"]).strip().lower() else 0.0


def _spell_backward(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule in whole numbers: the share of letters in place, less 0.2 when every letter is in place
    but more follow. Its float sum reached 0.9999999999999999 (and 1.0000000000000002) for the word with letters
    appended, so the 0.2 never applied and a wrong answer passed for a right one."""
    expected, given = str(entry["answer"]).lower(), answer.lower()
    if given == expected:
        return 1.0
    if not expected:
        return 0.0
    in_place = sum(a == b for a, b in zip(expected, given))
    return in_place / len(expected) - (0.2 if in_place == len(expected) else 0.0)


def _letter_jumble(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule (case and outer spaces ignored; partial credit for the words in place), over the longer of
    the two word lists: its share of the expected words alone gave the right words followed by more words 1.0 (one,
    two or four words) or 0.9999999999999998."""
    expected, given = str(entry["answer"]).strip().lower(), answer.strip().lower()
    if given == expected:
        return 1.0
    expected_words, given_words = expected.split(), given.split()
    longest = max(len(expected_words), len(given_words))
    return sum(a == b for a, b in zip(expected_words, given_words)) / longest if longest else 0.0


def _coin_flip(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule (a probability within 1e-4 is right; else credit for the digits it shares with the right
    one from the start), with that share taken of the longer of the two: of the shorter, "0." for 0.5 and "0.1" for
    0.125 scored 1.0."""
    try:
        given, expected = (float(Fraction(text.replace(",", ""))) for text in (answer, str(entry["answer"])))
    except (ValueError, ZeroDivisionError):
        return 0.0
    if abs(given - expected) <= 1e-4:
        return 1.0
    given_text, expected_text = f"{given:.10g}", f"{expected:.10g}"
    shared = next((i for i, (a, b) in enumerate(zip(given_text, expected_text)) if a != b),
                  min(len(given_text), len(expected_text)))
    return shared / max(len(given_text), len(expected_text))


def _number_sorting(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's check (a list in the asked order) with the numbers themselves required: its tolerance of 1 on
    each number let "-58." stand for -58.3, and any list of roundings pass. The question shows the numbers as the gold
    lists them, so a right answer repeats them."""
    if _rg_scorer("number_sorting")(answer, entry) != 1.0:
        return 0.0
    given = json.loads(answer.replace("'", '"'))
    expected = json.loads(str(entry["answer"]).replace("'", '"'))
    return float(all(abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b))) for a, b in zip(given, expected)))


def _puzzle24(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule (an expression of four numbers that makes 24; 0.01 otherwise) with the numbers required to
    be the puzzle's, each once, and the value exactly 24: it never compared the numbers, so one expression such as
    `2 + 9 + 6 + 7` scored 1.0 on every puzzle, and it truncated the value, so 24.5 made 24."""
    from sympy import Rational
    from sympy.parsing.sympy_parser import parse_expr

    numbers = sorted(int(n) for n in re.findall(r"\b\d+\b", answer))
    if numbers != sorted(int(n) for n in entry["metadata"]["numbers"]) or not re.fullmatch(r"[\d\s+\-*/()]+", answer):
        return 0.01
    try:
        value = parse_expr(answer.strip(), evaluate=True)
    except Exception:  # sympy raises many kinds on malformed text
        return 0.01
    return 1.0 if value.is_Rational and value == Rational(24) else 0.01


_FIRST_NUMBER_SIGNED = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?\b")
_ANY_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _gsm_symbolic(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule (the first number of the answer is the gold; 0.01 otherwise) with the number's sign: its
    pattern skipped a leading minus, so -63 scored 1 for 63, and a right negative answer scored 0.01."""
    match = _FIRST_NUMBER_SIGNED.search(answer)
    if match is None:
        return 0.0
    return 1.0 if float(match.group(0)) == float(str(entry["answer"])) else 0.01


def _word_sorting(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule (the share of words in their sorted place; 0.2 at least for the right words in another
    order) over the longer of the two lists: over the sorted list alone, the right words followed by more scored 1."""
    expected = entry["metadata"]["sorted_words"]
    given = [word.strip() for word in re.split(r",\s*", answer)] if answer else []
    if given == expected:
        return 1.0
    if not given:
        return 0.0
    share = sum(a == b for a, b in zip(given, expected)) / max(len(given), len(expected))
    return max(share, 0.2) if sorted(given) == sorted(expected) else share


def _time_intervals(answer: str, entry: dict[str, Any], config_text: str) -> float:
    """Reasoning Gym's rule, with the unit of a day count required to be days: it read the number before any word, so
    '11 hours' scored 1 for '11 days'."""
    words = answer.split()
    if entry["metadata"].get("task_type") == "date" and len(words) > 1 and words[1].strip(",.;").lower() not in (
            "day", "days", "d"):  # the question asks "in D days": some models write "23 D"
        return 0.0
    return _configured_scorer("time_intervals", config_text)(answer, entry)


def _game_of_life(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's share of the gold's cells given right, with 1 only for the gold's grid itself: it read the
    answer's cells at the gold's positions alone, so a grid with a row or column more scored 1."""
    try:
        if json.loads(answer) == json.loads(str(entry["answer"])):
            return 1.0
    except ValueError:
        return 0.0
    return min(_rg_scorer("game_of_life")(answer, entry), 0.99)


def _advanced_geometry(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule, with no more numbers than the gold holds: it read a point's first two comma pieces, so a
    right point followed by another one scored 1."""
    if len(_ANY_NUMBER.findall(answer)) > len(_ANY_NUMBER.findall(str(entry["answer"]))):
        return 0.01
    return _rg_scorer("advanced_geometry")(answer, entry)


def _same_json(given: Any, expected: Any) -> bool:
    """JSON values equal as values of their own kinds (an integer and a float may stand for each other): true is not 1,
    "1" is not 1, {} is not []."""
    def kind(value: Any) -> Any:
        return "number" if type(value) in (int, float) else type(value)  # bool is a type of its own here

    if kind(given) != kind(expected):
        return False
    if isinstance(given, dict):
        return given.keys() == expected.keys() and all(_same_json(given[key], expected[key]) for key in given)
    if isinstance(given, list):
        return len(given) == len(expected) and all(map(_same_json, given, expected))
    return given == expected


def _codeio(answer: str, entry: dict[str, Any]) -> float:
    """Reasoning Gym's rule (the gold's text; else the answer's {...} against the gold's JSON, credit by a tree edit
    distance) with 1 only for the gold's value: its distance reads every value as text and its equality is Python's,
    so {} scored 1 for [], "1" for 1 and true for 1."""
    score = _rg_scorer("codeio")(answer, entry)
    expected = str(entry["answer"]).strip()
    if score < 1.0 or answer.strip() == expected:
        return score
    given = json.loads(answer[answer.index("{"):answer.rindex("}") + 1])  # parsed by Reasoning Gym's rule already
    return 1.0 if _same_json(given, json.loads(expected)) else 0.01


@lru_cache(maxsize=64)
def _configured_scorer(task: str, config_text: str) -> Callable[[str, dict[str, Any]], float]:
    return reasoning_gym.create_dataset(task, seed=0, size=1, **json.loads(config_text)).score_answer


@lru_cache(maxsize=None)
def _rg_scorer(task: str) -> Callable[[str, dict[str, Any]], float]:
    """Reasoning Gym's own scorer of a task whose scoring reads no config (the repairs that build on it)."""
    return reasoning_gym.create_dataset(task, seed=0, size=1).score_answer


# Reasoning Gym 0.1.25 scorers we replace: game_of_life_halting's returns 1.0 for any non-empty answer; spell_backward's
# letter_jumble's and coin_flip's partial credit reaches (or rounds to) 1.0 for wrong answers; number_sorting's takes
# numbers off by up to 1; puzzle24's any expression that makes 24, with other numbers than the puzzle's; gsm_symbolic's
# reads no sign; word_sorting's and game_of_life's take the right answer followed by more; advanced_geometry's a right
# point followed by another; time_intervals' a day count in any unit; codeio's a JSON value of another kind.
REPAIRED_SCORERS: dict[str, Callable[[str, dict[str, Any]], float]] = {
    "game_of_life_halting": _exact_boolean,
    "spell_backward": _spell_backward,
    "letter_jumble": _letter_jumble,
    "coin_flip": _coin_flip,
    "number_sorting": _number_sorting,
    "puzzle24": _puzzle24,
    "gsm_symbolic": _gsm_symbolic,
    "word_sorting": _word_sorting,
    "game_of_life": _game_of_life,
    "advanced_geometry": _advanced_geometry,
    "codeio": _codeio,
}
# Repairs that build on Reasoning Gym's scorer made with the item's task config: {task: scorer(answer, entry, config)}
CONFIGURED_REPAIRS: dict[str, Callable[[str, dict[str, Any], str], float]] = {"time_intervals": _time_intervals}


def is_repaired(task: str) -> bool:
    """True when `task` is scored by the project's repair of Reasoning Gym's scorer."""
    return task in REPAIRED_SCORERS or task in CONFIGURED_REPAIRS


@lru_cache(maxsize=512)
def scorer_for(task: str, config_text: str) -> Callable[[str, dict[str, Any]], float]:
    """Returns the scorer of `task` built with its config (envs.generation.config_key text): a repair, or RG's."""
    if task in REPAIRED_SCORERS:
        return REPAIRED_SCORERS[task]
    if task in CONFIGURED_REPAIRS:
        return lambda answer, entry: CONFIGURED_REPAIRS[task](answer, entry, config_text)
    return _configured_scorer(task, config_text)


# Wrong answers (envs.audit.WRONG_CASES: near misses, structural changes, other items' answers, constants) that a
# scorer gives full marks, each accepted with the reason it cannot turn a wrong answer into a right one (letter case
# is envs.answer_forms' question). A case that scores 1, is not listed here and is not confirmed by envs.verifiers is a
# hole: the audit and its test fail.
_SPACING = "spacing does not change the answer"
_LEADING_FORMULA = "the parser reads the leading formula: what follows cannot make a wrong one right"
_FIRST_NUMBER = "only the first number is read: text after it cannot make a wrong number right"
ACCEPTED_LENIENCIES: dict[str, dict[str, str]] = {
    "complex_arithmetic": {"whitespace": _SPACING},
    "countdown": {"whitespace": "the expression is evaluated"},
    "cryptarithm": {"whitespace": "letter=digit pairs are read",
                    "element_more": "letter=digit pairs are read as a mapping: a pair said twice changes nothing",
                    "swapped": "letter=digit pairs are read as a mapping: their order does not count"},
    "figlet_font": {"whitespace": _SPACING},
    "fraction_simplification": {"appended": "only the leading fraction is read (strict_answers, on by default, closes it)",
                                "twice": "only the leading fraction is read (strict_answers, on by default, closes it)",
                                "whitespace": _SPACING},
    "gsm_symbolic": {"twice": _FIRST_NUMBER + " (strict_answers, on by default, closes it)"},
    "intermediate_integration": {"appended": "'+ Cxyz' is a constant of integration too: any right antiderivative",
                                 "whitespace": "the expression is parsed"},
    "kakurasu": {"appended": "only the grid's 0s and 1s are read, and the grid is checked"},
    "knights_knaves": {"appended": "name-role pairs are read; other words are ignored",
                       "twice": "name-role pairs are compared as a set",
                       "element_more": "name-role pairs are compared as a set: a pair said twice changes nothing",
                       "swapped": "name-role pairs are compared as a set: their order does not count"},
    "group_anagrams": {"swapped": "the groups are compared as a set: their order does not count"},
    "palindrome_partitioning": {
        "element_more": "the partitions are compared as a set: one listed twice changes nothing",
        "swapped": "the partitions are compared as a set: their order does not count"},
    "power_function": {"plus_one": "a relative tolerance: one more on a number of 1e14 or more is within it"},
    "rubiks_cube": {"swapped": "the moves are played on the cube, which must end solved: two moves that commute can "
                               "swap"},
    "needle_haystack": {"whitespace": _SPACING},
    "polynomial_equations": {"twice": "pieces between commas that are not one number are skipped; the roots read must "
                                      "be the right ones",
                             "swapped": "the roots are compared as a set: their order does not count"},
    "polynomial_multiplication": {"whitespace": "the expression is parsed"},
    "prime_factorization": {"whitespace": "the factors are read as numbers",
                            "swapped": "the factors are compared as a multiset: their order does not count"},
    "propositional_logic": {"appended": _LEADING_FORMULA, "twice": _LEADING_FORMULA, "element_more": _LEADING_FORMULA,
                            "whitespace": "the formula is evaluated"},
    "puzzle24": {"whitespace": "the expression is evaluated (the project's repaired scorer)"},
    "quantum_lock": {"appended": "only the button letters A-C are read: other text cannot change the sequence",
                     "whitespace": "only the button letters are read"},
    "simple_integration": {"appended": "'+ Cxyz' is a constant of integration too: any right antiderivative",
                           "whitespace": "the expression is parsed"},
    "sokoban": {"appended": "the moves are played: letters that are not moves do nothing, and the puzzle must end solved",
                "twice": "the moves are played and the puzzle must end solved",
                "whitespace": "the moves are played"},
    "time_intervals": {"twice": "only the leading duration is read (strict_answers, on by default, closes it)",
                       "dropped_last": "durations are parsed: '11 day' and '05:25:0' read as '11 days' and '05:25:00'",
                       "element_more": "only the leading duration is read (strict_answers, on by default, closes it)",
                       "whitespace": _SPACING},
    "word_ladder": {"whitespace": "the ladder is read as a list"},
    "word_sorting": {"whitespace": "the words are read as a list"},
}

_NUMBER = r"[-+]?\d+(?:\.\d+)?"
# With `strict_answers`, an answer to these tasks scores 0 unless it is the answer alone, in one of the forms the task's
# scorer reads as right; each closes a leniency above. {task: (pattern, the form in words)}
ANSWER_SHAPES: dict[str, tuple[re.Pattern, str]] = {
    "gsm_symbolic": (re.compile(_NUMBER), "a single number"),
    "fraction_simplification": (
        re.compile(r"\$*\s*(?:\\d?frac\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\}|\d+\s*/\s*\d+)\s*\$*", re.IGNORECASE),
        "a single fraction (a/b or \\frac{a}{b})"),
    "time_intervals": (
        re.compile(r"-?\d+(?: days?| d(?: days)?)?|\d+:\d\d(?::\d\d(?:\.\d+)?)?|-?\d+ days?, \d+:\d\d(?::\d\d)?", re.IGNORECASE),
        "a single duration (N days, N D, HH:MM[:SS[.mmm]] or N days, HH:MM[:SS])"),
}


def shape_problem(task: str, answer: str) -> str | None:
    """Returns why `answer` is not the answer alone in one of `task`'s ANSWER_SHAPES forms, or None (also for tasks
    without a shape)."""
    shape = ANSWER_SHAPES.get(task)
    if shape is None or shape[0].fullmatch(answer.strip()):
        return None
    return f"strict_answers: {task} takes {shape[1]} and nothing else"
