"""The GRPO, DAPO and Dr. GRPO formulas written out by hand (plain Python, no verl, no torch), for tests to hold
verl's numbers against: group advantages, the clipped policy-gradient loss under each loss aggregation mode, the
DAPO overlong penalty. Sources: GRPO (arXiv 2402.03300), DAPO (arXiv 2503.14476), Dr. GRPO (arXiv 2503.20783).
"""

from __future__ import annotations

import math
from collections import defaultdict
from statistics import fmean, stdev

STD_EPSILON = 1e-6  # verl's epsilon in the std-normalised GRPO advantage


def group_advantages(groups: list[str], scores: list[float], norm_by_std: bool) -> list[float]:
    """A_i = (r_i - mean of its group) / (std of its group + eps) (GRPO), or r_i - mean (Dr. GRPO); the sample std
    (n - 1), as torch.std. A group of one sample keeps its score (mean 0, std 1), as verl does."""
    members = defaultdict(list)
    for group, score in zip(groups, scores, strict=True):
        members[group].append(score)
    advantages = []
    for group, score in zip(groups, scores):
        values = members[group]
        mean, std = (fmean(values), stdev(values)) if len(values) > 1 else (0.0, 1.0)
        advantages.append((score - mean) / (std + STD_EPSILON) if norm_by_std else score - mean)
    return advantages


def clipped_token_loss(advantage: float, ratio: float, clip_low: float, clip_high: float, clip_c: float = 3.0) -> float:
    """PPO's clipped loss of one token, -min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), with dual clip at c for A < 0."""
    loss = max(-advantage * ratio, -advantage * min(max(ratio, 1 - clip_low), 1 + clip_high))
    return min(loss, -advantage * clip_c) if advantage < 0 else loss


def aggregate(token_losses: list[list[float]], mode: str, scale: float | None = None) -> float:
    """One scalar from each response's token losses:
    token-mean: sum over all tokens / all tokens (DAPO); token-sum: the plain sum;
    seq-mean-token-mean: mean over responses of each one's token mean (GRPO's 1/|o_i|);
    seq-mean-token-sum: mean over responses of each one's token sum;
    seq-mean-token-sum-norm: that divided by a constant `scale` (Dr. GRPO: the generation budget)."""
    rows = [row for row in token_losses if row]
    if mode == "token-mean":
        return sum(map(sum, rows)) / sum(map(len, rows))
    if mode == "token-sum":
        return sum(map(sum, rows))
    if mode == "seq-mean-token-mean":
        return fmean(sum(row) / len(row) for row in rows)
    if mode == "seq-mean-token-sum":
        return fmean(sum(row) for row in rows)
    if mode == "seq-mean-token-sum-norm":
        assert scale, "seq-mean-token-sum-norm needs its constant (loss_scale_factor)"
        return fmean(sum(row) for row in rows) / scale
    raise ValueError(f"no hand formula for loss_agg_mode {mode!r}")


def policy_loss(advantages: list[float], ratios: list[list[float]], mode: str, clip_low: float, clip_high: float,
                scale: float | None = None, clip_c: float = 3.0) -> float:
    """The policy-gradient loss of a batch: response i has advantage A_i on each of its tokens, whose ratios
    pi/pi_old are ratios[i] (its length is the response's length)."""
    return aggregate([[clipped_token_loss(a, r, clip_low, clip_high, clip_c) for r in row]
                      for a, row in zip(advantages, ratios, strict=True)], mode, scale)


def on_policy_loss(advantages: list[float], lengths: list[int], mode: str, scale: float | None = None) -> float:
    """The policy-gradient loss of the first update of a step, where pi = pi_old (every ratio 1: nothing clips)."""
    return policy_loss(advantages, [[1.0] * n for n in lengths], mode, 0.2, 0.2, scale)


def overlong_reward(length: int, max_length: int, buffer: int, factor: float) -> float:
    """DAPO's soft overlong punishment: 0 up to max_length - buffer tokens, then linear down to -factor at max_length."""
    return min(-(length - (max_length - buffer)) / buffer * factor, 0.0)


def finite(metrics: dict[str, float]) -> list[str]:
    """The keys of `metrics` whose values are not finite numbers (empty when all are)."""
    return sorted(key for key, value in metrics.items() if not math.isfinite(value))
