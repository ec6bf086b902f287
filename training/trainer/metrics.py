"""Per-task metrics of one step's responses, with stable keys grouped by prefix.

Keys: env/<task>/{reward,accuracy,answer_rate,format_rate,response_length,samples,zero_variance_groups},
env/{reward,accuracy,answer_rate,format_rate}, env/zero_variance_groups (fraction of prompts whose samples all scored
the same: no GRPO signal), env/truncated and env/truncated/<task> (share of responses cut at data.max_response_length),
timing/score_max (the slowest response's time in our reward function),
env/<task>/{full_marks_not_gold,answer_collapse} and the step line's reward-hole warnings (`reward_holes`, over every
response scored in the step; envs.hole_signals),
curriculum/<task>/level, sampling/<task>/{weight,signal,groups} (envs.sampler). The same function serves the trainer and the preflight, so both report alike.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean
from typing import Iterable, Mapping

from envs.hole_signals import Scored, hole_reports


@dataclass(frozen=True)
class SampleRecord:
    """One scored response."""

    task: str  # mix key of the prompt's task
    group: str  # prompt id (verl's uid): samples of one prompt form a GRPO group
    score: float  # reward given to the policy
    accuracy: float  # 1.0 if fully correct
    answer_found: float  # 1.0 if an <answer> block was extracted
    response_length: float  # tokens
    score_seconds: float = 0.0  # wall time of our reward function for this response
    format_ok: float = 0.0  # 1.0 if the response was well formed (envs.answers.format_ok)
    truncated: float = 0.0  # 1.0 if the response reached data.max_response_length
    pred: str | None = None  # the extracted answer
    pred_is_gold: float | None = None  # 1.0 if it is the item's gold (envs.hole_signals); None: not known


def reward_extra_info(extra_fields) -> dict:
    """Returns our reward dict from a response's `extra_fields` as verl's agent loop stores it ({} if absent)."""
    return (extra_fields or {}).get("reward_extra_info", {}) if isinstance(extra_fields, dict) else {}


def record_from_reward(task: str, group: str, reward_info: Mapping, score: float, response_length: float,
                       max_response_length: int | None = None) -> SampleRecord:
    """Returns a SampleRecord from envs' reward dict (keys acc, answer_found, format_ok, pred, pred_is_gold) and the
    score verl used; a response of `max_response_length` tokens or more was cut (None: not known)."""
    return SampleRecord(task=str(task), group=str(group), score=float(score),
                        accuracy=float(reward_info.get("acc", 0.0) or 0.0),
                        answer_found=float(reward_info.get("answer_found", 0.0) or 0.0),
                        response_length=float(response_length),
                        score_seconds=float(reward_info.get("score_seconds", 0.0) or 0.0),
                        format_ok=float(reward_info.get("format_ok", 0.0) or 0.0),
                        truncated=float(bool(max_response_length) and response_length >= max_response_length),
                        pred=None if reward_info.get("pred") is None else str(reward_info["pred"]),
                        pred_is_gold=_float_or_none(reward_info.get("pred_is_gold")))


def _float_or_none(value) -> float | None:
    """A float, or None for None, NaN (a missing value on its way through a table) and what is no number."""
    try:
        number = None if value is None else float(value)
    except (TypeError, ValueError):
        return None
    return None if number is None or number != number else number


def zero_variance_fraction(records: Iterable[SampleRecord]) -> float:
    """Returns the fraction of groups (prompts) whose scores are all equal; 0.0 for no records."""
    groups: dict[str, list[float]] = defaultdict(list)
    for record in records:
        groups[record.group].append(record.score)
    if not groups:
        return 0.0
    flat = sum(1 for scores in groups.values() if max(scores) - min(scores) < 1e-9)
    return flat / len(groups)


def env_metrics(records: list[SampleRecord]) -> dict[str, float]:
    """Returns env/<task>/... means per task and overall, and the share of zero-variance groups of each and of all."""
    by_task: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        by_task[record.task].append(record)
    metrics: dict[str, float] = {}
    for prefix, group in [(f"env/{task}", rows) for task, rows in sorted(by_task.items())] + [("env", records)]:
        if not group:
            continue
        metrics[f"{prefix}/reward"] = fmean(r.score for r in group)
        metrics[f"{prefix}/accuracy"] = fmean(r.accuracy for r in group)
        metrics[f"{prefix}/answer_rate"] = fmean(r.answer_found for r in group)
        metrics[f"{prefix}/format_rate"] = fmean(r.format_ok for r in group)
        metrics[prefix.replace("env", "env/truncated", 1)] = fmean(r.truncated for r in group)
        metrics[f"{prefix}/response_length"] = fmean(r.response_length for r in group)
        metrics[f"{prefix}/samples"] = float(len(group))
        metrics[f"{prefix}/zero_variance_groups"] = zero_variance_fraction(group)  # which tasks give no signal
    metrics.setdefault("env/zero_variance_groups", zero_variance_fraction(records))
    if records:
        metrics["timing/score_max"] = max(r.score_seconds for r in records)  # our reward function, slowest response
    return metrics


def scores_by_task(records: Iterable[SampleRecord]) -> dict[str, list[float]]:
    """Returns {task: [accuracy of each response]}: what the curriculum's promote/demote rule reads."""
    scores: dict[str, list[float]] = defaultdict(list)
    for record in records:
        scores[record.task].append(record.accuracy)
    return dict(scores)


def groups_by_task(records: Iterable[SampleRecord]) -> dict[str, list[list[float]]]:
    """Returns {task: [[score of each response of one group], ...]}: what the task sampler's signal reads."""
    groups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for record in records:
        groups[(record.task, record.group)].append(record.score)
    by_task: dict[str, list[list[float]]] = defaultdict(list)
    for (task, _), scores in groups.items():
        by_task[task].append(scores)
    return dict(by_task)


def curriculum_metrics(levels: Mapping[str, int]) -> dict[str, float]:
    """Returns curriculum/<task>/level for every leveled task."""
    return {f"curriculum/{task}/level": float(level) for task, level in sorted(levels.items())}


def reward_holes(records: Iterable[SampleRecord]) -> tuple[dict[str, float], list[str]]:
    """Returns env/<task>/full_marks_not_gold and env/<task>/answer_collapse for every task in `records`, and the
    warnings of the tasks whose full marks look like a hole in the reward (envs.hole_signals: its thresholds, and
    what each number counts)."""
    reports = hole_reports(Scored(r.task, r.group, r.accuracy, r.pred, r.pred_is_gold) for r in records)
    metrics: dict[str, float] = {}
    warnings: list[str] = []
    for task, report in reports.items():
        metrics[f"env/{task}/full_marks_not_gold"] = report.full_marks_not_gold
        metrics[f"env/{task}/answer_collapse"] = report.answer_collapse
        warnings.extend(report.warnings())
    return metrics, warnings
