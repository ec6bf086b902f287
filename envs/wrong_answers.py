"""Wrong answers a policy finds by exploring a task's answer space, built from a gold answer's shape.

A GRPO policy writes near misses of the right answer (`near_misses`: text appended, the answer twice, its last letter
dropped, its spacing changed, nothing) and answers of the right shape with one thing wrong: a list with an element more or fewer or two elements swapped, a grid with a row or
column more or fewer or transposed, a number negated, plus one or times ten, another unit. `structural_changes`
builds these from the gold as it is written, keeping its delimiters, so the answer still looks like one of the
task's. Each differs from the gold in value (`same_answer`): a scorer that gives one of them full marks has a
hole, unless envs.scorers.ACCEPTED_LENIENCIES says why that answer is right too (a set, where order does not count).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Callable

NEAR_MISSES = ("appended", "twice", "dropped_last", "whitespace", "empty")
STRUCTURAL_CHANGES = ("negated", "plus_one", "times_ten", "other_unit", "element_more", "element_fewer", "swapped",
                      "row_more", "row_fewer", "column_more", "column_fewer", "transposed")
# A single number, maybe with a unit after it ("21.80°", "12 cm", "5 days").
_NUMBER = re.compile(r"(?P<number>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)(?P<space>\s*)(?P<unit>[A-Za-z°%µ][A-Za-z°%µ./ ]*)?")
_OTHER_UNIT = {"°": "rad", "rad": "°", "days": "hours", "day": "hour", "hours": "minutes", "minutes": "seconds"}
_DELIMITERS = (", ", ",", "; ", " × ", " → ", " ")  # tried in order: the first that splits the gold in two or more


def _number_changes(number: str, unit: str | None, space: str) -> dict[str, str]:
    value = float(number)
    integral = re.fullmatch(r"[-+]?\d+", number) is not None

    def written(x: float) -> str:
        text = str(int(x)) if integral else repr(x)
        return text + (space + unit if unit else "")

    changes = {"plus_one": written(value + 1)}
    if value:
        changes["negated"] = written(-value)
        changes["times_ten"] = written(value * 10)
    if unit:
        other = _OTHER_UNIT.get(unit.strip(), "m" if unit.strip() != "m" else "kg")
        changes["other_unit"] = f"{number} {other}"
    return changes


def _sequence_changes(items: list, join: Callable[[list], str]) -> dict[str, str]:
    """An element more (the first repeated at the end), the last dropped, the first two different ones swapped."""
    changes = {"element_more": join(items + items[:1]), "element_fewer": join(items[:-1])}
    for i in range(1, len(items)):
        if items[i] != items[0]:
            swapped = list(items)
            swapped[0], swapped[i] = swapped[i], swapped[0]
            changes["swapped"] = join(swapped)
            break
    return changes


def _literal(gold: str) -> Any:
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(gold)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def _literal_changes(value: list | dict, compact: bool) -> dict[str, str]:
    """For a JSON or Python list (a grid when it is a list of equal rows) or dict, written back as JSON (compact
    when the gold had no spaces)."""
    separators = (",", ":") if compact else (", ", ": ")
    if isinstance(value, dict):
        keys = list(value)
        as_dict = lambda pairs: json.dumps(dict(pairs), separators=separators)  # noqa: E731
        pairs = [(k, value[k]) for k in keys]
        changes = {"element_fewer": as_dict(pairs[:-1])}
        if len(keys) >= 2 and value[keys[0]] != value[keys[1]]:  # two keys' values exchanged
            changes["swapped"] = as_dict([(keys[0], value[keys[1]]), (keys[1], value[keys[0]])] + pairs[2:])
        return changes
    join = lambda items: json.dumps(items, separators=separators)  # noqa: E731
    changes = _sequence_changes(value, join)
    if all(isinstance(row, list) for row in value) and len({len(row) for row in value}) == 1 and len(value[0]) >= 2:
        changes.update(row_more=changes.pop("element_more"), row_fewer=changes.pop("element_fewer"),
                       column_more=join([row + row[-1:] for row in value]),
                       column_fewer=join([row[:-1] for row in value]),
                       transposed=join([list(column) for column in zip(*value)]))
        changes.pop("swapped", None)
    return changes


def _grid_changes(gold: str) -> dict[str, str]:
    """Rows are lines; a row's cells are split by spaces (or are its characters, for grids written without them)."""
    lines = gold.split("\n")
    spaced = all(" " in line.strip() for line in lines if line.strip())
    numbers = all(_NUMBER.fullmatch(line.strip()) for line in lines)  # a column of numbers: one cell a row
    rows = [line.split() if spaced else [line] if numbers else list(line) for line in lines]
    join_row = " ".join if spaced else "".join
    join = lambda grid: "\n".join(join_row(row) for row in grid)  # noqa: E731
    changes = {"row_more": join(rows + rows[-1:]), "row_fewer": join(rows[:-1])}
    widths = {len(row) for row in rows}
    if len(widths) == 1 and widths.pop() >= 2:
        changes["column_more"] = join([row + row[-1:] for row in rows])
        changes["column_fewer"] = join([row[:-1] for row in rows])
        changes["transposed"] = join([list(column) for column in zip(*rows)])
    return changes


def structural_changes(gold: str) -> dict[str, str]:
    """{change: wrong answer} for the STRUCTURAL_CHANGES that `gold`'s shape allows: a number (with its unit), a JSON
    or Python list or dict, a grid (two or more lines), or a line of elements split by a delimiter. Changes that give
    the gold back are left out by the caller (see same_answer)."""
    text = gold.strip()
    if not text:
        return {}
    if match := _NUMBER.fullmatch(text):
        return _number_changes(match["number"], match["unit"], match["space"])
    if text[0] in "[{" and isinstance(value := _literal(text), (list, dict)) and value:
        return _literal_changes(value, compact=" " not in text)
    if "\n" in text:
        return _grid_changes(text)
    for delimiter in _DELIMITERS:
        parts = text.split(delimiter)
        if len(parts) >= 2 and all(parts):
            return _sequence_changes(parts, delimiter.join)
    return {}


def _parsed(text: str) -> Any:
    for parse in (float, ast.literal_eval):
        try:
            return parse(text.strip())
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def same_answer(a: str, b: str) -> bool:
    """True if two answers are the same text or parse to the same number or Python literal ("12.0" and "12.00",
    "[1, 2]" and "[1,2]")."""
    if a.strip() == b.strip():
        return True
    parsed = _parsed(a)
    return parsed is not None and parsed == _parsed(b)


def _drop_last_letter_or_digit(gold: str) -> str | None:
    """The gold without its last letter or digit; None when there is none, or when that digit is a number's last
    decimal and a 0 ("-100.0" -> "-100.", the same number) or one of two or more ("3.14" -> "3.1", a rounding that a
    task's tolerance may accept)."""
    for i in range(len(gold) - 1, -1, -1):
        if gold[i].isalnum():
            if re.search(r"\d\.(?:\d*0|\d{2,})$", gold[:i + 1]):
                return None
            return gold[:i] + gold[i + 1:]
    return None


def near_misses(gold: str) -> dict[str, str]:
    """{case: wrong answer} for the NEAR_MISSES of `gold` that differ from it in value (see same_answer)."""
    middle = len(gold) // 2
    spacing = re.sub(r"\s+", "", gold) if re.search(r"\s", gold.strip()) else gold[:middle] + " " + gold[middle:]
    cases = {"appended": gold + "xyz", "twice": f"{gold} {gold}", "dropped_last": _drop_last_letter_or_digit(gold),
             "whitespace": spacing if middle else None, "empty": ""}
    return {name: text for name, text in cases.items() if text is not None and not same_answer(text, gold)}


def wrong_answers(gold: str) -> dict[str, str]:
    """{case: wrong answer}: the near misses and the structural changes of `gold` that differ from it in value."""
    changes = {case: text for case, text in structural_changes(gold).items() if not same_answer(text, gold)}
    return near_misses(gold) | changes
