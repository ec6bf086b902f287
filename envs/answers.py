"""Answer extraction and format checks on a model's response text.

We scan with str.rfind instead of a regex so that a 1 MB response costs one linear pass, and so that nested or unclosed
tags have a defined answer: the innermost complete <answer>...</answer> pair that ends last.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<answer>", "</answer>"
_THINK_THEN_ANSWER = re.compile(r"\s*<think>(?:(?!</?think>|</?answer>).)*</think>\s*<answer>(?:(?!</?answer>|</?think>).)*</answer>\s*", re.S)
_ANSWER_ONLY = re.compile(r"(?:(?!</?answer>).)*<answer>(?:(?!</?answer>).)*</answer>\s*", re.S)


def extract_answer(response: str) -> str | None:
    """Returns the stripped text of the last complete answer block, or None if there is none.

    `<answer>3</answer> ... <answer>5` gives "3" (the unclosed block is ignored); `<answer><answer>x</answer></answer>`
    gives "x".
    """
    end = response.rfind(CLOSE)
    while end != -1:
        start = response.rfind(OPEN, 0, end)
        if start != -1:
            first_close = response.find(CLOSE, start)
            return response[start + len(OPEN):first_close].strip()
        end = response.rfind(CLOSE, 0, end)
    return None


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def last_number(response: str) -> str | None:
    """Returns the last number written in the response ("-12", "3.5"; thousands separators are not read), or None.

    The answer of a small model that states it in a sentence ("so 4 - 1 = 3."): the usual lenient extraction for
    numeric answers. Only the last number counts, so writing many numbers earns nothing.
    """
    found = None
    for found in _NUMBER.finditer(response):
        pass
    return found.group(0) if found else None


def last_line(response: str) -> str | None:
    """Returns the last non-empty line, stripped (the answer of a model that ignores the tags), or None."""
    for line in reversed(response.rstrip().splitlines()):
        if line.strip():
            return line.strip()
    return None


def format_ok(response: str, require_think: bool) -> bool:
    """True if the response is one answer block (after one think block when `require_think`) and nothing after it."""
    pattern = _THINK_THEN_ANSWER if require_think else _ANSWER_ONLY
    return pattern.fullmatch(response) is not None


def response_problem(response: object, max_chars: int) -> str | None:
    """Returns why a response cannot be scored at all (not text, empty, too long, invalid Unicode), or None."""
    if not isinstance(response, str):
        return f"response is {type(response).__name__}, not text"
    if not response.strip():
        return "empty response"
    if len(response) > max_chars:
        return f"response of {len(response)} characters exceeds max_response_chars={max_chars}"
    try:
        response.encode("utf-8")
    except UnicodeEncodeError:
        return "response holds invalid Unicode (lone surrogates)"
    return None
