"""The shipped training configs as tests see them: each composed once per test process (hydra's compose is slow
enough to count when many tests parametrize over every config at collection), and what each changes in a GRPO step."""

from __future__ import annotations

import copy
from functools import lru_cache

from omegaconf import DictConfig, OmegaConf

from envs.mix import Mix, load_mix, mix_path
from training.launch.config import compose_config, shipped_config_names

CONFIGS = shipped_config_names()
BASELINE = "grpo"  # plain GRPO: our defaults (configs/base/grpo.yaml) and nothing else
# what a GRPO step computes, beyond the data it is given
STEP_KEYS = ["algorithm", "actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora_alpha",
             "actor_rollout_ref.model.target_modules", "reward.reward_manager.name", "reward.reward_kwargs"] + [
    f"actor_rollout_ref.actor.{key}" for key in (
        "clip_ratio", "clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "loss_agg_mode", "loss_scale_factor",
        "policy_loss", "use_kl_loss", "kl_loss_coef", "kl_loss_type", "entropy_coeff", "ppo_epochs")]


@lru_cache(maxsize=None)
def _composed(name: str) -> DictConfig:
    return compose_config(name)


def composed(name: str) -> DictConfig:
    """configs/NAME.yaml composed with no overrides (a copy: callers may change it)."""
    return copy.deepcopy(_composed(name))


def mix_of(name: str) -> Mix:
    """The task mix config `name` trains on."""
    return load_mix(mix_path(_composed(name).env.mix))


def leaves(cfg: DictConfig, key: str) -> dict:
    """{dotted key: value} of every leaf under `key` (interpolations resolved; `_target_` is not a setting)."""
    node = OmegaConf.select(cfg, key)
    if not OmegaConf.is_config(node):
        return {key: node}
    flat = {}
    for child in node:
        if child != "_target_":
            flat.update(leaves(cfg, f"{key}.{child}"))
    return flat


@lru_cache(maxsize=None)
def step_settings(name: str) -> dict:
    """What config `name` changes in the GRPO step against configs/grpo.yaml ({dotted key: value}), and
    `curriculum: True` when its mix moves difficulty levels. Empty for a config that changes only the data."""
    ours, theirs = {}, {}
    for key in STEP_KEYS:
        ours.update(leaves(_composed(name), key))
        theirs.update(leaves(_composed(BASELINE), key))
    changed = {key: value for key, value in ours.items() if theirs.get(key, "<unset>") != value}
    if mix_of(name).curriculum.enabled:
        changed["curriculum"] = True
    return changed
