"""Independent checks, written by this project from an item's own data, that an answer solves the item.

Tasks with several right answers (a colouring, an expression that makes 24, a path), or one right answer written in
several ways (a duration), give full marks to answers other than the gold, and so may give them to another item's
answer. envs.audit accepts such a full mark only when the
task's check here confirms the answer solves this item (the puzzle's numbers, the graph's edges); a task without a
check here has one right answer, and a full mark for anything else is a hole. Each check reads the item's metadata,
never Reasoning Gym's scorer, so a scorer that drifts is caught instead of trusted.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter, deque
from fractions import Fraction
from typing import Any, Callable


def _graph_color(answer: str, entry: dict[str, Any]) -> bool:
    """Every vertex coloured with an allowed colour, no edge joining two vertices of one colour."""
    puzzle = entry["metadata"]["puzzle"]
    try:
        colouring = {int(vertex): color for vertex, color in json.loads(answer).items()}
    except (ValueError, TypeError, AttributeError):
        return False
    allowed = set(puzzle["color_options"])
    return (set(colouring) == set(puzzle["vertices"]) and all(c in allowed for c in colouring.values())
            and all(colouring[a] != colouring[b] for a, b in puzzle["edges"]))


def arithmetic_value(expression: str) -> tuple[Fraction, list[int]] | None:
    """(exact value, the integers it uses) of an expression of integers, + - * / and parentheses; None for anything
    else (names, powers, calls), for a division by zero, or for text that does not parse."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    numbers: list[int] = []
    operators = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__,
                 ast.Div: Fraction.__truediv__}

    def value(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            numbers.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in operators:
            return operators[type(node.op)](value(node.left), value(node.right))
        raise ValueError(f"not a number or + - * /: {ast.dump(node)[:40]}")

    try:
        return value(tree.body), numbers
    except (ValueError, ZeroDivisionError, RecursionError):
        return None


def _puzzle24(answer: str, entry: dict[str, Any]) -> bool:
    """The expression is 24 exactly, using each of the puzzle's numbers once and no other."""
    found = arithmetic_value(answer.replace("×", "*").replace("÷", "/"))
    return found is not None and found[0] == 24 and Counter(found[1]) == Counter(entry["metadata"]["numbers"])


def _countdown(answer: str, entry: dict[str, Any]) -> bool:
    """The expression makes the target exactly, using some of the given numbers, each at most as often as given."""
    found = arithmetic_value(answer)
    metadata = entry["metadata"]
    return (found is not None and found[0] == metadata["target"]
            and not Counter(found[1]) - Counter(metadata["numbers"]))


def _n_queens(answer: str, entry: dict[str, Any]) -> bool:
    """n queens on an n x n board, none attacking another, and every queen of the puzzle's board kept."""
    rows = [re.split(r"\s+", line.strip()) for line in answer.strip().split("\n")]
    puzzle = entry["metadata"]["puzzle"]
    n = len(puzzle)
    if len(rows) != n or any(len(row) != n or set(row) - {"Q", "_"} for row in rows):
        return False
    queens = [(r, c) for r in range(n) for c in range(n) if rows[r][c] == "Q"]
    given = [(r, c) for r in range(n) for c in range(n) if puzzle[r][c] == "Q"]
    return (len(queens) == n and set(given) <= set(queens) and len({r for r, _ in queens}) == n
            and len({c for _, c in queens}) == n and len({r - c for r, c in queens}) == n
            and len({r + c for r, c in queens}) == n)


def _jugs(answer: str, entry: dict[str, Any]) -> bool:
    """The moves, played from empty jugs, leave one jug holding the target."""
    puzzle = entry["metadata"]["puzzle"]
    capacity = dict(zip("ABCDEFGHIJ", puzzle["jug_capacities"]))
    water = dict.fromkeys(capacity, 0)
    moves = json.loads(answer)
    if not isinstance(moves, list):
        return False
    for move in moves:
        verb, _, jugs = str(move).partition(" ")
        if verb == "fill" and jugs in capacity:
            water[jugs] = capacity[jugs]
        elif verb == "empty" and jugs in capacity:
            water[jugs] = 0
        elif verb == "pour" and re.fullmatch(r"[A-J]->[A-J]", jugs) and {jugs[0], jugs[3]} <= set(capacity):
            source, target = jugs[0], jugs[3]
            poured = min(water[source], capacity[target] - water[target])
            water[source], water[target] = water[source] - poured, water[target] + poured
        else:
            return False
    return puzzle["target"] in water.values()


def _shortest_path(answer: str, entry: dict[str, Any]) -> bool:
    """A walk from * to # through open cells, as short as the shortest (breadth-first search); "infeasible" where
    none exists."""
    grid = entry["metadata"]["matrix"]
    cells = {(r, c): cell for r, row in enumerate(grid) for c, cell in enumerate(row)}
    start = next(p for p, cell in cells.items() if cell == "*")
    steps = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
    distance, queue = {start: 0}, deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in steps.values():
            step = (r + dr, c + dc)
            if cells.get(step, "X") != "X" and step not in distance:
                distance[step] = distance[(r, c)] + 1
                queue.append(step)
    goal = next(p for p, cell in cells.items() if cell == "#")
    if goal not in distance:
        return answer.strip().lower() == "infeasible"
    position, moves = start, answer.split()
    for move in moves:
        if move not in steps:
            return False
        position = (position[0] + steps[move][0], position[1] + steps[move][1])
        if cells.get(position, "X") == "X":
            return False
    return position == goal and len(moves) == distance[goal]


_LOGIC = re.compile(r"\s*([A-Z]|[¬∧∨→↔()])")


def _formula(text: str) -> Callable[[dict[str, bool]], bool]:
    """A propositional formula (letters, ¬ ∧ ∨ → ↔, parentheses; ↔ binds loosest, ¬ tightest) as a function of an
    assignment. Raises ValueError on anything else."""
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = _LOGIC.match(text, position)
        if match is None:
            raise ValueError(f"not a formula at {text[position:position + 10]!r}")
        tokens.append(match.group(1))
        position = match.end()
    levels = [("↔", lambda a, b: a == b), ("→", lambda a, b: (not a) or b), ("∨", lambda a, b: a or b),
              ("∧", lambda a, b: a and b)]

    def parse(i: int, level: int) -> tuple[Callable, int]:
        if level == len(levels):
            if i < len(tokens) and tokens[i] == "¬":
                inner, i = parse(i + 1, level)
                return (lambda v: not inner(v)), i
            if i < len(tokens) and tokens[i] == "(":
                inner, i = parse(i + 1, 0)
                if i >= len(tokens) or tokens[i] != ")":
                    raise ValueError("unclosed parenthesis")
                return inner, i + 1
            if i < len(tokens) and tokens[i].isalpha():
                name = tokens[i]
                return (lambda v: v[name]), i + 1
            raise ValueError("a formula ends early")
        left, i = parse(i, level + 1)
        symbol, combine = levels[level]
        while i < len(tokens) and tokens[i] == symbol:
            right, i = parse(i + 1, level + 1)
            left = (lambda f, g, op: lambda v: op(f(v), g(v)))(left, right, combine)
        return left, i

    formula, end = parse(0, 0)
    if end != len(tokens):
        raise ValueError("text after the formula")
    return formula


def _propositional_logic(answer: str, entry: dict[str, Any]) -> bool:
    """A formula of the item's variables, with an operator, true wherever every premise is true (truth table), and
    not true everywhere (a tautology concludes nothing)."""
    metadata = entry["metadata"]
    names = metadata["variables"]
    if not re.search(r"[¬∧∨→↔]", answer) or set(re.findall(r"[A-Z]", answer)) - set(names):
        return False
    premises, conclusion = [_formula(p) for p in metadata["premises"]], _formula(answer)
    assignments = [dict(zip(names, values)) for values in
                   ([bool(n >> k & 1) for k in range(len(names))] for n in range(2 ** len(names)))]
    return (all(conclusion(v) for v in assignments if all(p(v) for p in premises))
            and not all(conclusion(v) for v in assignments))


_DURATION = re.compile(r"\s*(?:(-?\d+) days?)?(?:,?\s*(\d+):(\d\d)(?::(\d\d(?:\.\d+)?))?)?\s*", re.IGNORECASE)


def _seconds(text: str) -> float | None:
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groups()):
        return None
    days, hours, minutes, seconds = match.groups()
    return (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60
            + (float(seconds) if seconds else 0.0))


def _time_intervals(answer: str, entry: dict[str, Any]) -> bool:
    """The same duration as the gold, however written: two items' durations can be equal ('18:23', '18:23:00')."""
    given, gold = _seconds(answer), _seconds(str(entry["answer"]))
    return given is not None and given == gold


# task -> check(answer, entry): True when the answer solves the item
VERIFIERS: dict[str, Callable[[str, dict[str, Any]], bool]] = {
    "graph_color": _graph_color,
    "puzzle24": _puzzle24,
    "countdown": _countdown,
    "n_queens": _n_queens,
    "jugs": _jugs,
    "shortest_path": _shortest_path,
    "propositional_logic": _propositional_logic,
    "time_intervals": _time_intervals,
}


def solves(task: str, answer: str, entry: dict[str, Any]) -> bool | None:
    """True or False when `task` has a check here; None when it has one right answer (no check)."""
    check = VERIFIERS.get(task)
    if check is None:
        return None
    try:
        return bool(check(answer, entry))
    except (KeyError, TypeError, ValueError, IndexError, StopIteration, RecursionError):
        return False
