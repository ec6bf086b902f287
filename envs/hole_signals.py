"""Signs that the reward pays for wrong answers: full marks for answers that are not the gold, and one answer earning
full marks across many different items. Pure functions; the trainer logs them per task and step
(training/trainer/metrics.py) and warns on the step line.

A GRPO policy looks for whatever the reward pays for. When a scorer gives full marks to wrong answers (Reasoning Gym's
puzzle24 gave 1.0 to any expression of four in-range numbers making 24, the puzzle's numbers or not) the policy finds
it, and accuracy rises while the skill does not. Two signals show it:

- `pred_is_gold` (a field of every reward result, envs.reward): whether the extracted answer is the entry's gold
  answer after a loose equivalence (`loose_form`): 1.0 or 0.0; None where the entry's answer is None (several right
  answers, checked procedurally: nothing to compare with). A missing answer is not the gold (0.0).
- per task and step (`hole_reports`): among the responses with full marks, the share whose answer is not the gold
  (`full_marks_not_gold`), and the most items one answer got full marks on (`answer_collapse`).

The equivalence is loose on purpose: it errs towards "the gold", so that a warning means an answer the gold does not
contain. Case, `$`, `\\boxed{}`, quotes, brackets, commas between elements, a final full stop and spacing do not
count; numbers compare by value (`20.0` is `20`, `1,234` is `1234`, `+5` is `5`); and the answer is a multiset of its
tokens (numbers, words, other symbols), so a set written in another order is the gold, and so is an expression with
its terms reordered (puzzle24's right answers are often the gold's numbers in another order). A sign, another
number, another word or one element more still differ. What it cannot see: a scorer that accepts the gold's tokens in
a wrong order (a sequence in another order counts as the gold). Where entries carry one example of several right
answers (puzzle24, countdown, jugs, shortest_path), an answer is the gold also when envs.verifiers' independent check
of the item confirms it. The warnings are questions for a person, not verdicts.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Iterable, Mapping, NamedTuple

from envs.verifiers import solves

# \boxed{...} and text wrappers: the command goes, its braces are separators
_WRAPPERS = re.compile(r"\\(?:boxed|text|textbf|mathrm|mbox|displaystyle|left|right)\b")
# a number (thousands grouped by commas, decimals, an exponent), signed where the sign cannot be an operator (at the
# start, after a space, a bracket, a comma or another operator: `-3` and `5 -3`, not `5-3`); else a word; else a symbol
_TOKEN = re.compile(r"(?P<number>(?:(?<![\w)\]}.])[-+])?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?)"
                    r"(?!\w)|(?P<word>\w+)|(?P<symbol>[^\w\s])")
# single quotes around a word or phrase ('a', ['x y', 'z']); one after a letter stays (R' in a move, don't)
_QUOTED = re.compile(r"(?<![\w'])'([^']*)'(?!\w)")
_SEPARATORS = set(",;.()[]{}\"`$")  # dropped: they shape a list or wrap an answer, they do not change it
_NO_ANSWER = "\x00no answer"  # the loose form of a missing answer (no text has it)

MIN_FULL_MARKS = 4  # full marks a task needs in a step before its not-gold share can warn
NOT_GOLD_SHARE = 0.5  # warn above this share of a task's full marks going to answers that are not the gold
MIN_COLLAPSE_ITEMS = 4  # warn when one answer has full marks on at least this many items (as answer_collapse counts)
COLLAPSE_SHARE = 0.5  # ... and on at least this share of the task's items of the step
SHOWN_CHARS = 30  # an answer in a warning is cut to this many characters


def _number(text: str) -> str:
    """A number's text by value, exactly (no rounding): `20.0` and `20` are `20`, `1,234` is `1234`, `.50` is
    `0.5`; beyond 40 places, digits and a power of ten (`1e999`)."""
    if len(text) > 200:  # no answer's number: compared as written (a long run of digits costs no arithmetic)
        return text.replace(",", "")
    try:
        sign, digit_tuple, exponent = Decimal(text.replace(",", "")).as_tuple()
    except (ArithmeticError, ValueError):
        return text
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits or not isinstance(exponent, int):
        return "0" if not digits else text
    exponent += len(digits) - len(digits.rstrip("0"))
    digits = digits.rstrip("0")
    if 0 <= exponent <= 40:
        body = digits + "0" * exponent
    elif -40 <= exponent < 0:
        body = digits.rjust(-exponent + 1, "0")
        body = body[:exponent] + "." + body[exponent:]
    else:
        body = f"{digits}e{exponent}"
    return ("-" if sign else "") + body


def loose_form(answer: Any) -> str | None:
    """Returns the answer's loose form: its tokens (numbers by value, words in lower case, symbols) sorted, as one
    string; None for no answer. Two answers are equivalent when their loose forms are equal (`loosely_same`)."""
    if answer is None:
        return None
    text = _QUOTED.sub(r" \1 ", _WRAPPERS.sub(" ", str(answer))).lower().replace("\u2212", "-")
    tokens = []
    for match in _TOKEN.finditer(text):
        if match["number"] is not None:
            tokens.append(_number(match["number"]))
        elif match["word"] is not None:
            tokens.append(match["word"])
        elif match["symbol"] not in _SEPARATORS:
            tokens.append(match["symbol"])
    return " ".join(sorted(tokens))


def loosely_same(answer: Any, gold: Any) -> bool:
    """True when `answer` is `gold` up to the loose equivalence (module docstring); False when either is None."""
    if answer is None or gold is None:
        return False
    return loose_form(answer) == loose_form(gold)


def pred_is_gold(pred: str | None, entry: Mapping[str, Any]) -> float | None:
    """The reward result's `pred_is_gold`: 1.0 when the extracted answer is the entry's gold (`loosely_same`) or, for
    a task with several right answers, envs.verifiers' check confirms it solves the item (another expression that
    makes 24 with the puzzle's numbers); 0.0 when it is not or there is none; None when the entry's answer is None
    (no gold to compare)."""
    gold = entry.get("answer") if isinstance(entry, Mapping) else None
    if gold is None:
        return None
    if loosely_same(pred, gold):
        return 1.0
    task = entry.get("metadata", {}).get("source_dataset")
    return float(pred is not None and bool(solves(task, pred, entry)))


class Scored(NamedTuple):
    """One scored response, as the aggregation reads it."""

    task: str
    item: str  # the prompt (its GRPO group): responses of one item share its gold
    accuracy: float  # 1.0: full marks
    pred: str | None  # the extracted answer
    pred_is_gold: float | None  # the reward's field (None: not known)


def shown(answer: str | None) -> str:
    """An answer as a warning names it: quoted, spaces collapsed, cut to SHOWN_CHARS; `(no answer)` for None."""
    if answer is None:
        return "(no answer)"
    text = " ".join(str(answer).split())
    return '"' + (text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "...") + '"'


@dataclass(frozen=True)
class HoleReport:
    """One task's signals in one step (`hole_reports`)."""

    task: str
    items: int  # distinct items (prompts) of the task in the step
    full_marks: int  # responses with full marks
    judged: int  # of those, on items with one right answer (pred_is_gold known)
    not_gold: int  # of those, whose answer is not the gold
    not_gold_answer: str | None = None  # the not-gold answer with full marks most often, as first written
    not_gold_count: int = 0  # how often
    collapse_items: int = 0  # the most items one answer got full marks on, counted as answer_collapse says
    collapse_answer: str | None = None  # that answer, as first written

    @property
    def full_marks_not_gold(self) -> float:
        """The share of the judged full marks whose answer is not the gold; 0.0 when none were judged."""
        return self.not_gold / self.judged if self.judged else 0.0

    @property
    def answer_collapse(self) -> float:
        """The most items one answer earned full marks on, over the task's items in the step; 0.0 without full marks.

        An item counts once per answer. The items whose gold that answer is count as one between them: they share
        one gold, so one answer right on all of them is no hole (letter_counting's gold is "1" on 83% of items).
        Every other item counts on its own: its gold is another answer, or it has several right answers (gold None,
        a puzzle of its own). So 1.0 is one answer taking full marks on every item of the step, whatever its gold.
        """
        return self.collapse_items / self.items if self.items else 0.0

    def warnings(self) -> list[str]:
        """The step line's warnings for this task (module thresholds); [] when nothing looks wrong."""
        found = []
        if self.judged >= MIN_FULL_MARKS and self.full_marks_not_gold > NOT_GOLD_SHARE:
            found.append(f"reward hole? {self.task}: {self.not_gold} of {self.judged} full marks are not the gold "
                         f"(most often {shown(self.not_gold_answer)}, {self.not_gold_count}x)")
        if self.collapse_items >= max(MIN_COLLAPSE_ITEMS, COLLAPSE_SHARE * self.items):
            found.append(f"reward hole? {self.task}: one answer, {shown(self.collapse_answer)}, has full marks on "
                         f"{self.collapse_items} of {self.items} items whose golds differ")
        return found


def hole_reports(rows: Iterable[Scored]) -> dict[str, HoleReport]:
    """Returns {task: HoleReport} over one step's scored responses (every task present, with full marks or not)."""
    by_task: dict[str, list[Scored]] = defaultdict(list)
    for row in rows:
        by_task[row.task].append(row)
    return {task: _report(task, rows) for task, rows in sorted(by_task.items())}


def _report(task: str, rows: list[Scored]) -> HoleReport:
    full = [row for row in rows if row.accuracy >= 1.0]
    judged = [row for row in full if row.pred_is_gold is not None]
    written: dict[str, str | None] = {}  # loose form -> the answer as first written
    for row in full:
        written.setdefault(_key(row.pred), row.pred)
    not_gold = Counter(_key(row.pred) for row in judged if row.pred_is_gold < 1.0)
    gold_items: dict[str, set[str]] = defaultdict(set)  # answer -> items whose gold it is
    other_items: dict[str, set[str]] = defaultdict(set)  # answer -> every other item it had full marks on
    for row in full:
        (gold_items if row.pred_is_gold == 1.0 else other_items)[_key(row.pred)].add(row.item)
    spread = {key: bool(gold_items[key]) + len(other_items[key] - gold_items[key]) for key in written}
    top_not_gold = max(not_gold, key=lambda key: (not_gold[key], key), default=None)
    top_spread = max(spread, key=lambda key: (spread[key], key), default=None)
    return HoleReport(task=task, items=len({row.item for row in rows}), full_marks=len(full), judged=len(judged),
                      not_gold=sum(not_gold.values()),
                      not_gold_answer=written.get(top_not_gold), not_gold_count=not_gold.get(top_not_gold, 0),
                      collapse_items=spread.get(top_spread, 0), collapse_answer=written.get(top_spread))


def _key(pred: str | None) -> str:
    form = loose_form(pred)
    return _NO_ANSWER if form is None else form
