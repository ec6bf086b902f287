"""Right answers in the forms models write them, and the reading that gives them the marks their value earns.

A model that knows the answer writes `20.0` for 20, `1,234` for 1234, `$x$` or `\\boxed{x}` inside the answer tags,
a grid whose lines end in a space, hexadecimal digits in upper case, a sentence with its full stop. Reasoning Gym's
scorers compare text, so these score 0, and a policy learns the format quirk instead of the skill. Per task, each
form is the same answer (it must score 1) or a different one (it must score 0): `form_meaning` says which, and why.
`reading` rewrites an answer by the task's "same" forms only, into the way the gold is written; envs.reward scores
it when the answer as written did not score 1. envs.audit checks both directions on every task, and that no wrong
answer reaches full marks through a reading.
"""

from __future__ import annotations

import json
import re
from typing import Any

FORMS = ("float_zero", "thousands", "name_prefix", "dollars", "boxed", "line_end_spaces", "case", "full_stop")
FORM_WORDS = {
    "float_zero": "a whole number written N.0", "thousands": "thousands separators", "name_prefix": "x = N", "dollars": "a $...$ wrapper",
    "boxed": "a \\boxed{} wrapper", "line_end_spaces": "spaces at line ends and a final newline",
    "case": "another letter case", "full_stop": "a final full stop after a sentence",
}
_SAME = {
    "float_zero": "the same number", "thousands": "the same number", "name_prefix": "the number, named", "dollars": "math notation around the answer",
    "boxed": "math notation around the answer", "line_end_spaces": "the same rows and cells",
    "full_stop": "punctuation that ends the sentence", "case": "the task does not depend on letter case",
}
_CASE_IS_PART = "letter case is part of the answer"
# Tasks whose answers hold letters but do not depend on their case: the form `case` is the same answer there.
CASE_FREE: dict[str, str] = {
    "acre": "on, off or undetermined", "base_conversion": "digits above 9 in either case name one number",
    "bitwise_arithmetic": "hexadecimal digits in either case name one number",
    "caesar_cipher": "the plain text's words: the question writes them in upper case",
    "calendar_arithmetic": "weekday names", "color_cube_rotation": "colour names", "complex_arithmetic":
    "i and I name one imaginary unit", "course_schedule": "True or False", "family_relationships": "relation names",
    "figlet_font": "the word drawn in the figure", "game_of_life_halting": "True or False",
    "isomorphic_strings": "True or False", "knights_knaves": "names and roles", "letter_jumble":
    "Reasoning Gym's rule: words in any case", "mahjong_puzzle": "Pass, Chi or Peng", "needle_haystack": "names",
    "palindrome_generation": "a palindrome in any case", "ransom_note": "True or False",
    "sentence_reordering": "Reasoning Gym's rule: words in any case", "shortest_path": "direction words",
    "spell_backward": "Reasoning Gym's rule: letters in any case", "syllogism": "Yes or No",
    "tsumego": "board coordinates", "word_ladder": "Reasoning Gym's rule: words in any case",
    "zebra_puzzles": "names", "quantum_lock": "button letters",
    "fraction_simplification": "\\DFRAC and \\dfrac are read alike", "power_function": "1e5 and 1E5 name one number",
    "time_intervals": "the unit word in any case",
    "propositional_logic": "the variables are single letters, written in upper case by the question",
}
_INTEGER = re.compile(r"[-+]?\d+")
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_NAMED = re.compile(r"[A-Za-z]\w*\s*=\s*([-+]?[\d,]+(?:\.\d+)?)")
_SEPARATED = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_WRAPPERS = (re.compile(r"\\boxed\{(.*)\}", re.S), re.compile(r"\$\$(.*)\$\$", re.S), re.compile(r"\$(.*)\$", re.S),
             re.compile(r"\\\((.*)\\\)", re.S), re.compile(r"\\\[(.*)\\\]", re.S))


EXAMPLE_ANSWER_KEYS = ("example_answer", "example_correct_answer", "possible_answer")


def gold_answer(entry: dict[str, Any]) -> str | None:
    """The entry's answer; for tasks with several right answers (answer None), the example its metadata holds."""
    if entry["answer"] is not None:
        return str(entry["answer"])
    metadata = entry.get("metadata", {})
    for key in EXAMPLE_ANSWER_KEYS:
        if key in metadata:
            value = metadata[key]
            return value if isinstance(value, str) else json.dumps(value)
    return None


def form_meaning(task: str, form: str) -> tuple[bool, str]:
    """(same answer?, why) for `form` in `task`."""
    if form == "case":
        return (True, CASE_FREE[task]) if task in CASE_FREE else (False, _CASE_IS_PART)
    return True, _SAME[form]


def written_as(form: str, gold: str) -> str | None:
    """The gold written in `form`, or None when the form does not apply to it (or leaves it as it is)."""
    text = gold.strip()
    if form == "float_zero":
        written = text + ".0" if _INTEGER.fullmatch(text) else None
    elif form == "thousands":
        written = f"{int(text.split('.')[0]):,}" + text[len(text.split('.')[0]):] if (
            _NUMBER.fullmatch(text) and len(text.lstrip("+-").split(".")[0]) >= 4) else None
    elif form == "name_prefix":
        written = f"x = {text}" if _NUMBER.fullmatch(text) else None
    elif form == "dollars":
        written = f"${text}$"
    elif form == "boxed":
        written = f"\\boxed{{{text}}}"
    elif form == "line_end_spaces":
        written = "\n".join(line + " " for line in gold.split("\n")) + "\n" if "\n" in text else None
    elif form == "case":
        written = text.upper() if text != text.upper() else text.lower()
    else:  # full_stop
        written = text + "." if _is_sentence(text) else None
    return None if written is None or written == gold else written


def _unwrapped(answer: str) -> str:
    text = answer.strip()
    for _ in range(3):  # $\boxed{x}$ and the like
        match = next((m for w in _WRAPPERS if (m := w.fullmatch(text))), None)
        if match is None:
            break
        text = match.group(1).strip()
    return text


def reading(task: str, answer: str, gold: str | None) -> str:
    """`answer` rewritten by `task`'s same-answer forms towards the way `gold` is written (its shape, not its value):
    wrappers removed, a number's separators and zero decimals dropped when the gold is a plain number, line ends
    trimmed for a grid, a full stop dropped, the gold's letter case. Only the shape of the gold is read, so a reading
    can make a right answer's form match and never a wrong answer's value."""
    same = {form for form in FORMS if form_meaning(task, form)[0]}
    text = _unwrapped(answer) if {"dollars", "boxed"} & same else answer.strip()
    if gold is None:
        return text
    gold = gold.strip()
    if _NUMBER.fullmatch(gold):
        if "name_prefix" in same and (named := _NAMED.fullmatch(text)):
            text = named.group(1)
        if "thousands" in same and _SEPARATED.fullmatch(text):
            text = text.replace(",", "")
        if "float_zero" in same and _INTEGER.fullmatch(gold) and re.fullmatch(r"[-+]?\d+\.0+", text):
            text = text.split(".")[0]
    if "line_end_spaces" in same and "\n" in gold:
        text = "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))
    if "full_stop" in same and text.endswith(".") and _is_sentence(gold):
        text = text[:-1].rstrip()
    if "case" in same:
        if text.casefold() == gold.casefold():
            return gold
        text = text.lower() if gold == gold.lower() else text.upper() if gold == gold.upper() else text
    return text


def _is_sentence(text: str) -> bool:
    """Three or more words, one of three letters or more, the last ending in a letter (a sentence without its full
    stop; not a move list such as `F U R'`)."""
    words = text.split()
    return len(words) >= 3 and text[-1].isalpha() and any(len(word) >= 3 and word.isalpha() for word in words)
