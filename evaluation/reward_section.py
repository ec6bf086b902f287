"""The `reward:` section of an evaluation suite: training's reward options (envs.reward.RewardOptions), so that the
evaluator scores as training did."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evaluation.config import EvalConfig


def parse_reward(raw: Any, source: str) -> dict:
    """The `reward:` section, checked by envs.reward.RewardOptions (training's own check): unknown keys with close
    matches, wrong values with the key. Returns the keys as given."""
    from envs.reward import RewardOptions
    from evaluation.config import ConfigError, _check_keys, _mapping

    raw = dict(_mapping(raw, "reward", source))
    names = {f.name for f in dataclasses.fields(RewardOptions)}
    _check_keys(raw, names, "reward.", source)
    for key, value in raw.items():
        default = RewardOptions.__dataclass_fields__[key].default
        if isinstance(default, (int, float)) and not isinstance(default, bool) and (
                isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ConfigError(f"{source}: 'reward.{key}' must be a number, got {value!r}")
        if isinstance(default, bool) and key != "answer_fallback" and not isinstance(value, bool):
            raise ConfigError(f"{source}: 'reward.{key}' must be true/false, got {value!r}")
    try:
        RewardOptions(**raw)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{source}: 'reward': {err}") from err
    return raw


def reward_options(cfg: EvalConfig):
    """The RewardOptions the evaluator scores with: the suite's `reward:` (its timeout_s, else score_timeout_s)."""
    from envs.reward import RewardOptions

    return RewardOptions(**{"timeout_s": cfg.score_timeout_s, **cfg.reward})
