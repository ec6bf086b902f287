"""The reward: Reasoning Gym's scorer on the extracted answer, against the entry the prompt carried.

Nothing is regenerated to score a response: the stream puts the entry (question, answer, metadata) and the task config
into `extra_info`, and the scorer reads them. Every scorer call is guarded: an exception scores 0 with its reason; hangs
are handled by envs.isolation, which runs this module's `score_response` in a child process with a timeout.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from envs.answer_forms import gold_answer, reading
from envs.answers import (ANSWER_FORMS, after_reasoning, as_rendered, describe_format, final_answer, format_ok,
                          last_line, last_number, response_problem)
from envs.generation import config_key
from envs.hole_signals import pred_is_gold
from envs.scorers import ANSWER_SHAPES, scorer_for, shape_problem


@dataclass(frozen=True)
class RewardOptions:
    """How a response's score is made (all keys can be set in `reward_kwargs` of the training config)."""

    partial_credit: bool = False  # keep RG's partial scores; False binarises (1 only for a fully correct answer)
    format_reward: float = 0.0  # added when the response is well formed (see envs.answers.format_ok)
    # no <answer> block (small models): "last_line" scores the last non-empty line, "last_number" the last number in
    # the response (else the last line, for answers that are not numbers); true means "last_line"; false/"" scores 0
    answer_fallback: bool | str = False
    require_think: bool = False  # well formed needs a <think>...</think> block before the answer
    # where the answer may stand (after the reasoning): answer (<answer>...</answer>), boxed (\boxed{...}, the habit
    # of models trained on math) or both, [answer, boxed] (a \boxed{} inside an <answer> block is unwrapped)
    answer_forms: str | tuple[str, ...] = "answer"
    max_response_length: int = 0  # tokens the rollout may generate; needed by the overlong penalty
    overlong_buffer: int = 0  # DAPO soft overlong penalty over the last N tokens before max_response_length; 0 = off
    overlong_penalty: float = 1.0  # penalty at max_response_length (linear from 0 at the start of the buffer)
    # a response cut at max_response_length (it never finished): "as_is" scores it like any other (a reasoning cut
    # before </think> has no answer anyway), "zero" scores 0, "penalty" scores -overlong_penalty (DAPO's full penalty)
    truncated: str = "as_is"
    max_response_chars: int = 200_000  # longer responses score 0 without being parsed
    timeout_s: float = 10.0  # a scorer running longer on one response is stopped and scores 0
    isolate: bool = True  # score in a child process (hang-proof); False scores in-process (exceptions still caught)
    # the answer alone, in a form the task's scorer reads as right, for the tasks of envs.scorers.ANSWER_SHAPES
    # (gsm_symbolic, fraction_simplification, time_intervals): their scorers read the leading value and ignore the rest.
    # On by default: it costs no right answer on Reasoning Gym's 5,700 published completions of those tasks (BENCHMARKS)
    strict_answers: bool = True
    tokenizer_path: str = ""  # verl passes text only: response tokens are counted with this tokenizer (model's path)

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> RewardOptions:
        """Builds options from keyword arguments, refusing unknown names (with the list of valid ones)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ValueError(f"unknown reward option(s) {unknown}; valid: {sorted(names)}")
        return cls(**kwargs)

    def __post_init__(self):
        fallback = {True: "last_line", False: ""}.get(self.answer_fallback, self.answer_fallback)
        if fallback not in FALLBACKS:
            raise ValueError(f"reward: answer_fallback={self.answer_fallback!r}; use one of {sorted(FALLBACKS)} "
                             "or true (= last_line) / false")
        object.__setattr__(self, "answer_fallback", fallback)  # one spelling from here on
        given = [self.answer_forms] if isinstance(self.answer_forms, str) else list(self.answer_forms)
        forms = {str(f).strip() for f in given}
        if not forms or forms - set(ANSWER_FORMS):
            raise ValueError(f"reward: answer_forms={self.answer_forms!r}; use {' or '.join(ANSWER_FORMS)}, or both as a "
                             "list: [answer, boxed]")
        object.__setattr__(self, "answer_forms", tuple(f for f in ANSWER_FORMS if f in forms))  # one spelling
        if self.truncated not in TRUNCATED:
            raise ValueError(f"reward: truncated={self.truncated!r}; use one of {', '.join(TRUNCATED)}")
        if self.overlong_buffer and self.max_response_length <= self.overlong_buffer:
            raise ValueError("reward: overlong_buffer needs max_response_length > overlong_buffer (both in tokens)")

    def format_description(self) -> str:
        """What the format reward accepts, in words (envs.answers.describe_format)."""
        return describe_format(self.require_think, self.answer_forms)

    def describe(self) -> str:
        """One line for the launch console: where answers are read, the format reward and how a cut response scores."""
        forms = " or ".join({"answer": "<answer>...</answer>", "boxed": "\\boxed{...}"}[f] for f in self.answer_forms)
        fallback = f", else the {self.answer_fallback.replace('_', ' ')}" if self.answer_fallback else ""
        text = f"answer: {forms} after the reasoning{fallback}"
        if self.format_reward:
            text += f"; format reward {self.format_reward:g} for {self.format_description()}"
        if not self.strict_answers:
            text += "; strict_answers=false: the leading value counts for " + ", ".join(sorted(ANSWER_SHAPES))
        return text + f"; cut responses: {self.truncated}"


TRUNCATED = ("as_is", "zero", "penalty")  # RewardOptions.truncated


def _last_number_or_line(response: str) -> str | None:
    return last_number(response) or last_line(response)


# answer_fallback -> the extraction used when a response has no <answer> block (None: it scores 0)
FALLBACKS = {"": None, "last_line": last_line, "last_number": _last_number_or_line}


# A float sum lands this close outside [0, 1] (spell_backward's reached 1.0000000000000002): such a value is clamped;
# one further out is a scorer bug and scores 0. A score below 1 is partial credit, kept at most PARTIAL_MAX.
HAIR = 1e-6
PARTIAL_MAX = 1.0 - HAIR


def rg_score(task: str, answer: str, entry: dict[str, Any], config: dict[str, Any] | str | None = None
             ) -> tuple[float, str]:
    """Returns (score in [0, 1], reason): the task's scorer (envs.scorers: Reasoning Gym's or a repair) on `answer`;
    exceptions give (0, their text).

    1.0 (a right answer) only when the scorer returns exactly 1: a partial score that rounds up to it, or a float sum a
    hair past it, is partial credit (at most PARTIAL_MAX). `config` is the task config the entry was generated with,
    as a dict or as envs.generation.config_key text.
    """
    config_text = config if isinstance(config, str) else config_key(config or {})
    if entry.get("answer") == "" and not answer.strip():  # string_manipulation can end empty; RG's default scorer
        return 1.0, ""  # gives every empty answer 0, the right one too
    try:
        value = float(scorer_for(task, config_text)(answer, entry))
    except Exception as exc:  # scorers raise ValueError/TypeError/KeyError on malformed answers
        return 0.0, f"scorer raised {type(exc).__name__}: {str(exc)[:200]}"
    if value == 1.0:
        return 1.0, ""
    if not -HAIR <= value <= 1.0 + HAIR:  # also catches NaN
        return 0.0, f"scorer returned {value}, outside [0, 1]"
    return min(max(value, 0.0), PARTIAL_MAX), ""


def score_answer(task: str, answer: str, entry: dict[str, Any], config: dict[str, Any] | str | None = None,
                 strict: bool = True) -> tuple[float, str]:
    """rg_score after the `strict_answers` check (envs.scorers.ANSWER_SHAPES): the scoring that training, the
    evaluator and envs.audit share once an answer has been read from a response. An answer that does not score 1 as
    written is scored again as envs.answer_forms reads it (`20.0` for 20, `$x$`, a grid's line ends), so a right
    answer in a form models write gets full marks; the reason then says what was read."""
    read = reading(task, answer, gold_answer(entry))
    if strict and (problem := shape_problem(task, answer)) and (read == answer or shape_problem(task, read)):
        return 0.0, problem
    score, reason = rg_score(task, answer, entry, config)
    if score == 1.0 or read == answer.strip():
        return score, reason
    read_score, read_reason = rg_score(task, read, entry, config)
    if read_score == 1.0:
        return 1.0, f"read as {read[:80]!r} (envs.answer_forms: the same answer in another form)"
    return score, reason


def _overlong(response_length: int | None, options: RewardOptions) -> float:
    if not options.overlong_buffer or response_length is None:
        return 0.0
    start = options.max_response_length - options.overlong_buffer
    return options.overlong_penalty * min(max(response_length - start, 0) / options.overlong_buffer, 1.0)


# Every result holds these keys and one length key (see length_key).
# pred_is_gold: the answer is the entry's gold, loosely (envs.hole_signals; None: the entry has several right answers)
RESULT_FIELDS = ("score", "acc", "raw_score", "answer_found", "format_ok", "overlong_penalty", "task", "pred", "reason",
                 "pred_is_gold")


def length_key(response_length: int | None) -> str:
    """`response_length` (tokens) when the tokens were counted, else `response_chars` (characters).

    verl logs every key of the result, so one name must never mean characters in one run and tokens in another; and
    it builds its per-batch arrays from the first result's keys, so the key depends only on whether tokens are counted.
    """
    return "response_length" if response_length is not None else "response_chars"


def zero_result(task: str | None, reason: str, response: Any = None, response_length: int | None = None
                ) -> dict[str, Any]:
    """Returns a result with every RESULT_FIELDS key and the length key, scoring 0 for `reason`."""
    result = dict.fromkeys(RESULT_FIELDS, 0.0)
    chars = len(response) if isinstance(response, str) else 0
    length = response_length if response_length is not None else chars
    result.update({"task": task, "pred": None, "reason": reason, length_key(response_length): float(length)})
    return result


def score_response(
    response: Any,
    entry: dict[str, Any],
    task: str | None = None,
    options: RewardOptions = RewardOptions(),
    config: dict[str, Any] | str | None = None,
    response_length: int | None = None,
    prompt_opens_think: bool = False,
) -> dict[str, Any]:
    """Scores one response in this process. Never raises on bad responses.

    Returns {score, acc, raw_score, answer_found, format_ok, overlong_penalty, task, pred, reason} and the length:
    `response_length` (the tokens given) or, when none are given, `response_chars`. `acc` is 1.0 only for a fully
    correct answer; `score` = (raw or binarised) + format bonus - overlong penalty (which needs the tokens).
    `prompt_opens_think`: the rendered prompt ended inside an opened `<think>` (envs.prompts.prompt_opens_think), so
    the response is judged as if it began with that tag (envs.answers.as_rendered).
    """
    task = task or entry["metadata"]["source_dataset"]
    result = zero_result(task, "", response, response_length)
    problem = response_problem(response, options.max_response_chars)
    if problem:
        result["reason"] = problem
        return result
    rendered = as_rendered(response, prompt_opens_think)
    final = after_reasoning(rendered)
    answer = None if final is None else final_answer(final, options.answer_forms)
    tagged = answer is not None
    fallback = FALLBACKS[options.answer_fallback]
    if not tagged and fallback is not None and final is not None:
        answer = fallback(final)
    if final is None:
        raw, reason = 0.0, "the reasoning never closed (no </think>): no answer"
    elif answer is None:
        raw, reason = 0.0, _no_answer_reason(options.answer_forms)
    else:
        raw, reason = score_answer(task, answer, entry, config, options.strict_answers)
    if not tagged and answer is not None:
        reason = reason or f"no {_form_names(options.answer_forms)}: scored the {options.answer_fallback.replace('_', ' ')}"
    correct = raw == 1.0  # rg_score gives exactly 1 only to a right answer
    well_formed = format_ok(rendered, options.require_think, options.answer_forms)
    penalty = _overlong(response_length, options)
    base = raw if options.partial_credit else float(correct)
    result.update(
        score=base + options.format_reward * well_formed - penalty, acc=float(correct), raw_score=raw,
        answer_found=float(tagged), format_ok=float(well_formed), overlong_penalty=penalty,
        pred=answer, reason=reason, pred_is_gold=pred_is_gold(answer, entry),
    )
    return result


def _form_names(forms: tuple[str, ...]) -> str:
    return " or ".join({"answer": "<answer> block", "boxed": "\\boxed{}"}[f] for f in forms)


def _no_answer_reason(forms: tuple[str, ...]) -> str:
    if forms == ("answer",):
        return "no <answer>...</answer> block"  # the reason runs and the generation viewer have always shown
    return f"no {_form_names(forms)} after the reasoning"


def score_truncated(result: dict[str, Any], truncated: bool | None, options: RewardOptions) -> dict[str, Any]:
    """Returns `result` with its score set for a response cut at max_response_length by `options.truncated` (see
    RewardOptions), and `truncated` (1.0, 0.0; -1.0 when unknown). Accuracy stays what the answer earned.

    Training learns of the cut from the rollout (training/trainer/seeding.py), the evaluator from the backend's
    finish_reason; both call this after score_response, so they score a cut response alike."""
    result["truncated"] = -1.0 if truncated is None else float(bool(truncated))
    if truncated and options.truncated != "as_is":
        result["score"] = 0.0 if options.truncated == "zero" else -options.overlong_penalty
        result["reason"] = (f"cut at max_response_length: scored {result['score']:g} (truncated={options.truncated})"
                            + (f"; {result['reason']}" if result["reason"] else ""))
    return result
