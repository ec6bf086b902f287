"""Answer extraction and format checks on a model's response text, read as the chat template renders it.

We scan with str.rfind instead of a regex so that a 1 MB response costs one linear pass, and so that nested or unclosed
tags have a defined answer: the innermost complete <answer>...</answer> pair that ends last.

Reasoning models think before they answer. A template that opens the think block in the prompt (DeepSeek-R1's
distills; Qwen3's with thinking on) leaves a response that starts inside it, without `<think>`: `as_rendered` puts the
tag back, so the response is judged as the model saw it. The answer is read only after the reasoning closes (the last
`</think>`): a number in the reasoning never counts, and a reasoning that never closes has no answer.
"""

from __future__ import annotations

import re

OPEN, CLOSE = "<answer>", "</answer>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
BOXED = "\\boxed{"
ANSWER_FORMS = ("answer", "boxed")  # <answer>...</answer>, \boxed{...}
_REASONING = re.compile(r"\s*<think>(?:(?!</?think>|</?answer>).)*", re.S)  # what precedes the last </think>
_TAG_FIRST = re.compile(r"\s*<answer>(?:(?!</?answer>|</?think>).)*</answer>\s*", re.S)
_TAG_LAST = re.compile(r"(?:(?!</?answer>).)*<answer>(?:(?!</?answer>).)*</answer>\s*", re.S)
_NO_TAGS = re.compile(r"(?:(?!</?answer>|</?think>).)*", re.S)


def as_rendered(response: str, prompt_opens_think: bool) -> str:
    """The response as the template renders it: with the `<think>` that the prompt already opened put in front."""
    return THINK_OPEN + response if prompt_opens_think else response


def after_reasoning(rendered: str) -> str | None:
    """The text after the last `</think>`; the whole text if it holds no think tag; None while the reasoning is open
    (a `<think>` that never closes: such a response has no answer)."""
    close = rendered.rfind(THINK_CLOSE)
    if close != -1:
        return rendered[close + len(THINK_CLOSE):]
    return None if THINK_OPEN in rendered else rendered


def last_boxed(text: str) -> str | None:
    """The content of the last complete `\\boxed{...}` (nested braces counted), or None.

    verl has the same reading (verl.utils.reward_score.math_dapo.last_boxed_only_string + remove_boxed), but envs/
    must not import verl: the evaluator's vLLM environment has none. tests/envs/test_answers.py pins that both agree.
    """
    start, end = text.rfind(BOXED), len(text)
    while start != -1:
        depth = 0
        for i in range(start + len(BOXED) - 1, end):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start + len(BOXED):i]
        # unclosed: an earlier complete one still counts, and it must close before this one starts (a linear scan)
        start, end = text.rfind(BOXED, 0, start), start
    return None


def final_answer(final: str, forms: tuple[str, ...]) -> str | None:
    """The answer in the text after the reasoning, in one of `forms` (ANSWER_FORMS), or None.

    The last <answer> block wins; with "boxed", a `\\boxed{...}` inside it is unwrapped, and without a block the last
    `\\boxed{...}` of the text is the answer.
    """
    tagged = extract_answer(final) if "answer" in forms else None
    if "boxed" in forms:
        boxed = last_boxed(final if tagged is None else tagged)
        if boxed is not None:
            return boxed.strip()
    return tagged


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


def format_ok(rendered: str, require_think: bool, forms: tuple[str, ...] = ("answer",)) -> bool:
    """True if the rendered response (see as_rendered) is well formed, as `describe_format` says.

    One reasoning block (required when `require_think`) first, then the answer: one <answer> block and nothing after it
    (after the reasoning, nothing before it either), or, with "boxed" in `forms`, text without tags holding a
    `\\boxed{...}`.
    """
    close = rendered.rfind(THINK_CLOSE)
    if close == -1:
        if require_think or THINK_OPEN in rendered:
            return False
        final, tag_pattern = rendered, _TAG_LAST
    else:
        if _REASONING.fullmatch(rendered, 0, close) is None:
            return False
        final, tag_pattern = rendered[close + len(THINK_CLOSE):], _TAG_FIRST
    if "answer" in forms and tag_pattern.fullmatch(final):
        return True
    return "boxed" in forms and _NO_TAGS.fullmatch(final) is not None and last_boxed(final) is not None


def describe_format(require_think: bool, forms: tuple[str, ...]) -> str:
    """What format_ok accepts, in words (the run's report and console state it beside the format reward)."""
    answers = " or ".join({"answer": "<answer>...</answer>", "boxed": "a text with \\boxed{...}"}[f] for f in forms)
    return f"{'<think>...</think>' if require_think else '[<think>...</think>]'} then {answers}"


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
