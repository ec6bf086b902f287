"""Task sampling: each task's share of the training stream, from how much the trainer can learn from it.

GRPO learns nothing from a group whose responses all score the same (every advantage is zero). On a mix of easy and
hard tasks most groups of the easy ones are all-correct and most of the hard ones all-wrong, so fixed mix weights spend
most rollouts where there is no gradient. With `sampler: {strategy: learnability}` in the mix, the trainer reports
every scored group (`update({task: [[score, ...], ...]})`) and the shares follow a per-task signal:

- signal: over the last `window` groups of the task, the mean of a per-group value: `advantage` = mean |GRPO
  advantage| of the group (|score - group mean| / group std, 0 for a flat group; 2*sqrt(p(1-p)) for binary scores
  with p correct, so it peaks at p = 1/2), or `variance` = 1 if the group's scores differ, else 0. A task without
  observations counts as 1.0 (optimistic: it is tried before it is judged).
- exploration (UCB over the windows): score_k = signal_k + exploration * sqrt(ln(1 + N) / (1 + n_k)), n_k the task's
  groups in its window, N the sum over tasks.
- selection (softmax with the declared weights as prior): q_k proportional to weight_k * exp(score_k / temperature).
- floor: every task keeps at least `floor` x its declared share; the rest is shared in proportion to q (water-filling),
  so no task of the mix starves and a task with no signal is still re-checked as the model changes.

`uniform` (the default) keeps the declared weights; it still computes the signal, so both strategies log the same keys.

When new weights take effect: `update` recomputes them at once, and the stream reads them for every position it
reads afterwards (the trainer updates between steps, so from the first position of the next step or refill). The
task at a position is therefore a pure function of (split, seed, position, the sampler state when the stream read it),
and the state (windows) is part of the stream's saved state; `weights()` is a pure function of the state.
Within one update the groups of a task are put in a canonical order (sorted by their scores), so the state does not
depend on the order in which verl hands the responses back.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from typing import Any, Iterable, Mapping, Sequence

from envs.mix import Mix, SamplerSettings

UNOBSERVED_SIGNAL = 1.0  # signal of a task whose window is empty: optimistic, so it gets tried
_EPS = 1e-9


def group_value(scores: Sequence[float], signal: str) -> float:
    """Returns one group's learnability value: mean |advantage| (GRPO's, std-normalised) or 1/0 for any variance."""
    n = len(scores)
    if n < 2:
        return 0.0
    mean = math.fsum(scores) / n
    spread = max(scores) - min(scores)
    if spread <= _EPS:
        return 0.0
    if signal == "variance":
        return 1.0
    std = math.sqrt(math.fsum((s - mean) ** 2 for s in scores) / (n - 1))  # unbiased, as verl's GRPO (torch.std)
    return math.fsum(abs(s - mean) for s in scores) / n / (std + 1e-6)


def floored_shares(raw: Sequence[float], minimum: Sequence[float]) -> list[float]:
    """Returns shares summing to 1, each >= its minimum, the mass above the minima in proportion to `raw`.

    Water-filling: a task whose proportional share falls below its minimum is pinned there and the others re-share.
    """
    total_min = sum(minimum)
    if total_min >= 1.0 - _EPS:
        return [m / total_min for m in minimum]
    pinned: set[int] = set()
    while True:
        free = 1.0 - sum(minimum[i] for i in pinned)
        mass = sum(raw[i] for i in range(len(raw)) if i not in pinned)
        shares = [minimum[i] if i in pinned else free * raw[i] / mass for i in range(len(raw))]
        below = {i for i in range(len(raw)) if i not in pinned and shares[i] < minimum[i]}
        if not below:
            return shares
        pinned |= below


class TaskSampler:
    """Per-task shares of the training stream (see the module docstring); state_dict/load_state_dict for data.pt."""

    def __init__(self, mix: Mix, settings: SamplerSettings | None = None):
        self.mix = mix
        self.settings = mix.sampler if settings is None else settings
        self.keys = mix.keys
        total = math.fsum(spec.weight for spec in mix.tasks)
        self.prior = [spec.weight / total for spec in mix.tasks]
        self._windows: dict[str, deque] = {key: deque(maxlen=self.settings.window) for key in self.keys}
        self.updates = 0  # how many updates the state has seen (for logs and tests)
        self._set_weights()

    def _set_weights(self) -> None:
        self._weights = self._compute_weights()
        self._cumulative = list(itertools.accumulate(self._weights))

    @property
    def reweights(self) -> bool:
        """False for `uniform`: the stream then draws with the declared weights, exactly as without a sampler."""
        return self.settings.reweights

    # ----- signal and weights (pure functions of the windows)
    def signals(self) -> dict[str, float]:
        """Returns {task: mean group value over its window} (UNOBSERVED_SIGNAL for an empty window)."""
        return {key: (math.fsum(w) / len(w) if w else UNOBSERVED_SIGNAL) for key, w in self._windows.items()}

    def counts(self) -> dict[str, int]:
        return {key: len(w) for key, w in self._windows.items()}

    def _compute_weights(self) -> list[float]:
        if not self.reweights:
            return list(self.prior)
        s = self.settings
        signals, counts = self.signals(), self.counts()
        total = sum(counts.values())
        scores = [signals[k] + s.exploration * math.sqrt(math.log1p(total) / (1 + counts[k])) for k in self.keys]
        top = max(scores)  # subtract the max before exp: same softmax, no overflow at small temperatures
        raw = [p * math.exp((x - top) / s.temperature) for p, x in zip(self.prior, scores)]
        return floored_shares(raw, [s.floor * p for p in self.prior])

    def weights(self) -> dict[str, float]:
        """Returns {task: share of the stream} in effect now (sums to 1)."""
        return dict(zip(self.keys, self._weights))

    def weight_values(self) -> list[float]:
        """The shares in mix order."""
        return list(self._weights)

    def cumulative(self) -> list[float]:
        """The running sums of the shares in mix order: what the stream's draw compares its hash with."""
        return self._cumulative

    # ----- feedback
    def update(self, groups: Mapping[str, Iterable[Sequence[float]]]) -> dict[str, float]:
        """Adds one step's scored groups ({task: [scores of one group, ...]}); returns the new weights.

        Tasks not in the mix are ignored. The new weights apply to every position the stream reads from now on.
        """
        for key, task_groups in groups.items():
            if key not in self._windows:
                continue
            values = [group_value([float(x) for x in scores], self.settings.signal)
                      for scores in sorted((tuple(float(x) for x in g) for g in task_groups))]
            self._windows[key].extend(values)
        self.updates += 1
        self._set_weights()
        return self.weights()

    def forget(self, keys: Iterable[str]) -> None:
        """Empties the windows of `keys` (e.g. tasks whose curriculum level just moved: their past groups were of
        another difficulty), so they are re-measured with the exploration bonus of a new task."""
        for key in keys:
            if key in self._windows:
                self._windows[key].clear()
        self._set_weights()

    def metrics(self) -> dict[str, float]:
        """Returns sampling/<task>/{weight,signal,groups} for the step's log."""
        out: dict[str, float] = {}
        signals, counts = self.signals(), self.counts()
        for key, weight in self.weights().items():
            out[f"sampling/{key}/weight"] = weight
            out[f"sampling/{key}/signal"] = signals[key]
            out[f"sampling/{key}/groups"] = float(counts[key])
        return out

    # ----- state (inside the stream's state, saved in data.pt)
    def state_dict(self) -> dict[str, Any]:
        return {"strategy": self.settings.strategy, "updates": self.updates,
                "windows": {key: list(w) for key, w in self._windows.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the windows (keys not in this mix are ignored) and recomputes the weights from them."""
        for key, window in state.get("windows", {}).items():
            if key in self._windows:
                self._windows[key] = deque((float(v) for v in window), maxlen=self.settings.window)
        self.updates = int(state.get("updates", 0))
        self._set_weights()
