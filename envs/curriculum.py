"""Per-task difficulty levels from Reasoning Gym's curricula, moved by recent scores.

A task with a `level` in its mix entry gets its config from RG's curriculum at that level (all of the curriculum's
attributes set to that level, capped at each attribute's last level; keys in the entry's `config` fill in the rest).
With `curriculum.enabled`, `Curriculum.update` averages the last `window` scores of each task and moves its level up at
`promote_at`, down at `demote_at`, once `min_samples` scores have arrived since the last move. Levels are part of the
stream's saved state, so a resumed run continues at the levels it reached.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from functools import lru_cache
from typing import Any, Iterable, Mapping

from reasoning_gym.factory import create_curriculum

from envs.generation import config_key
from envs.mix import Mix
from envs.tasks import RESERVED_CONFIG_KEYS, check_level, max_level


@lru_cache(maxsize=1024)
def _leveled_config(task: str, config_text: str, level: int) -> tuple[tuple[str, Any], ...]:
    import json

    curriculum = create_curriculum(task)
    curriculum.set_global_level(level)
    generated = curriculum.generate_configuration(defaults=json.loads(config_text))
    return tuple((f.name, getattr(generated, f.name)) for f in dataclasses.fields(generated)
                 if f.name not in RESERVED_CONFIG_KEYS)


def leveled_config(task: str, config: dict[str, Any], level: int) -> dict[str, Any]:
    """Returns the full task config at a curriculum level (curriculum attributes override `config`)."""
    return dict(_leveled_config(task, config_key(config), level))


class Curriculum:
    """Current level of every leveled task in a mix, and the rule that moves them."""

    def __init__(self, mix: Mix):
        self.mix = mix
        self.settings = mix.curriculum
        self._levels = {spec.key: spec.level for spec in mix.tasks if spec.level is not None}
        self._scores = {key: deque(maxlen=self.settings.window) for key in self._levels}
        self._since_change = dict.fromkeys(self._levels, 0)

    def config_for(self, key: str) -> dict[str, Any]:
        """Returns the Reasoning Gym config for a mix key at its current level."""
        spec = self.mix.task(key)
        if key not in self._levels:
            return spec.config
        return leveled_config(spec.task, spec.config, self._levels[key])

    def levels(self) -> dict[str, int]:
        """Returns {mix key: current level} for every leveled task."""
        return dict(self._levels)

    def update(self, task_scores: Mapping[str, Iterable[float]]) -> dict[str, int]:
        """Adds scores per mix key; moves levels if the rule says so. Returns {key: new level} for tasks that moved."""
        if not self.settings.enabled:
            return {}
        moved = {}
        for key, scores in task_scores.items():
            if key not in self._levels:
                continue
            scores = [float(s) for s in scores]
            self._scores[key].extend(scores)
            self._since_change[key] += len(scores)
            if self._since_change[key] < self.settings.min_samples:
                continue
            mean = sum(self._scores[key]) / len(self._scores[key])
            step = 1 if mean >= self.settings.promote_at else -1 if mean <= self.settings.demote_at else 0
            new_level = min(max(self._levels[key] + step, 0), max_level(self.mix.task(key).task))
            if new_level != self._levels[key]:
                self._levels[key] = moved[key] = new_level
                self._scores[key].clear()
                self._since_change[key] = 0
        return moved

    def state_dict(self) -> dict[str, Any]:
        return {
            "levels": dict(self._levels),
            "scores": {key: list(window) for key, window in self._scores.items()},
            "since_change": dict(self._since_change),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores levels and score windows; keys not in this mix are ignored, missing ones keep their start."""
        for key, level in state.get("levels", {}).items():
            if key in self._levels:
                self._levels[key] = check_level(self.mix.task(key).task, level, f"curriculum state: {key}: ")
        for key, window in state.get("scores", {}).items():
            if key in self._scores:
                self._scores[key] = deque(window, maxlen=self.settings.window)
        for key, count in state.get("since_change", {}).items():
            if key in self._since_change:
                self._since_change[key] = int(count)
