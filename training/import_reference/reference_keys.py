"""How each key of a reasoning-gym `training/configs/*.yaml` maps to our config (used by training.import_reference).

Their file is a full config of an early-2025 verl plus three sections of their own (`reasoning_gym`, `curriculum`,
`reward`). Ours layers our defaults over verl 0.9.1's `ppo_trainer`, with the task stream under `env:`. Every key
lands in one of: carried (same key in verl 0.9.1, written only where the value differs from ours), translated (a
renamed key, or one of their sections turned into our mix / env keys), or removed with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

VERL_SECTIONS = ("data", "actor_rollout_ref", "algorithm", "trainer", "critic", "reward_model")
# verl keys of theirs that verl 0.9.1 renamed: old -> (new, value translation)
RENAMED = {
    "actor_rollout_ref.actor.optim.warmup_style": "actor_rollout_ref.actor.optim.lr_scheduler_type",
    "trainer.val_generations_to_log_to_wandb": "trainer.log_val_generations",
}
# verl keys of theirs with no use here, and why
REMOVED = {
    "data.train_files": "the task stream replaces parquet files (env.mix)",
    "data.val_files": "validation is a fixed set from the stream's validation split (env.validation_size)",
    "data.prompt_key": "the stream's items carry chat messages; no parquet column is read",
    "data.val_batch_size": "deprecated in verl 0.9.1: validation goes to the inference engines as one batch",
    "data.return_raw_input_ids": "the stream's items carry chat messages; verl's parquet dataset is not used",
    "actor_rollout_ref.rollout.load_format": "verl 0.9.1 loads the rollout as 'dummy' and syncs the actor's "
                                             "weights; 'dummy_dtensor' is gone",
    "actor_rollout_ref.rollout.use_fire_sampling": "not in verl 0.9.1",
    "verbose": "not a verl 0.9.1 key",
}
GRPO_UNUSED = {"critic": "GRPO trains no critic; verl 0.9.1's defaults stay",
               "reward_model": "the reward is Reasoning Gym's scorer (envs/verl_reward.py), not a reward model"}


@dataclass
class Translation:
    """The imported config's pieces and the report's rows (their key, what happened, where/why)."""

    config: dict = field(default_factory=dict)  # our keys (nested) to write over /base/grpo
    mix: dict = field(default_factory=dict)  # the mix file
    rows: list[tuple[str, str, str]] = field(default_factory=list)

    def put(self, dotted: str, value: Any) -> None:
        """Set a nested key of the output config."""
        node = self.config
        *parents, last = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    def row(self, key: str, action: str, where: str) -> None:
        self.rows.append((key, action, where))


def leaves(node: Any, prefix: str = ""):
    """(dotted key, value) for every leaf of a nested dict; empty dicts and lists are leaves."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, node


def _missing(base: DictConfig, key: str) -> bool:
    return OmegaConf.select(base, key, default="<missing>", throw_on_missing=False) == "<missing>"


def _coerce(value: Any, like: Any) -> Any:
    """YAML reads `1e-6` as a string: give it the type of our value where that is a number."""
    if isinstance(value, str) and isinstance(like, float):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def translate_verl(ref: dict, base: DictConfig, out: Translation) -> None:
    """Their verl sections -> carried / renamed / removed keys, compared with our composed config `base`."""
    grpo = ref.get("algorithm", {}).get("adv_estimator", "grpo") == "grpo"
    for section in VERL_SECTIONS + ("verbose",):
        if section not in ref:
            continue
        if grpo and section in GRPO_UNUSED:
            out.row(f"{section}.*", "removed", GRPO_UNUSED[section])
            continue
        for key, value in leaves(ref[section], section):
            _verl_key(key, value, base, out)


def _verl_key(key: str, value: Any, base: DictConfig, out: Translation) -> None:
    if key in REMOVED:
        out.row(key, "removed", REMOVED[key])
    elif key in RENAMED:
        out.put(RENAMED[key], value)
        out.row(key, "renamed", f"{RENAMED[key]} (verl 0.9.1's name)")
    elif key == "trainer.remove_previous_ckpt_in_save":
        if value:
            out.put("trainer.max_actor_ckpt_to_keep", 1)
        out.row(key, "renamed", "trainer.max_actor_ckpt_to_keep: 1" if value else "dropped: false is verl's default")
    elif key == "trainer.resume_from_path" and value is False:
        out.row(key, "translated", "null (false meant none; verl 0.9.1 takes a path or null)")
    elif isinstance(value, str) and "${" in value:
        out.row(key, "kept verl's", "an interpolation verl 0.9.1 sets up itself")
    elif _missing(base, key):
        out.row(key, "removed", "not in verl 0.9.1's config")
    else:
        ours = OmegaConf.select(base, key)
        ours = OmegaConf.to_container(ours) if isinstance(ours, (DictConfig,)) or OmegaConf.is_list(ours) else ours
        value = _coerce(value, ours)
        if value is None and ours is not None:
            out.row(key, "kept ours", f"null: our (or verl 0.9.1's) default {ours!r} stays")
        elif value == ours:
            out.row(key, "same", "equal to our default; not written")
        else:
            out.put(key, value)
            out.row(key, "carried", f"{key} (ours: {ours!r})")


def translate_reward(ref: dict, out: Translation) -> None:
    """Their `reward:` section -> env.reward options."""
    reward = ref.get("reward") or {}
    for key, value in reward.items():
        if key == "use_accuracy":
            out.row("reward.use_accuracy", "translated" if value else "ignored",
                    "the reward is the task's accuracy (binarised; env.reward.partial_credit: false)" if value else
                    "false has no counterpart: the reward is always the task's score")
        elif key == "secondary_rewards":
            for index, spec in enumerate(value or []):
                _secondary(index, spec or {}, out)
        else:
            out.row(f"reward.{key}", "ignored", "no counterpart in our reward options (envs/reward.py)")


def _secondary(index: int, spec: dict, out: Translation) -> None:
    name, where = spec.get("name"), f"reward.secondary_rewards[{index}]"
    if name == "format":
        out.put("env.reward.format_reward", float(spec.get("scaling_factor", 1.0)))
        out.row(f"{where} (format)", "translated", "env.reward.format_reward = scaling_factor")
        for key in (spec.get("kwargs") or {}):
            out.row(f"{where}.kwargs.{key}", "ignored", "our format check reads the response as generated "
                                                        "(env.reward.require_think asks for a <think> block)")
    elif name == "cosine":
        out.row(f"{where} (cosine)", "removed", "no cosine length reward here; DAPO's overlong penalty "
                                               "(env.reward.overlong_buffer) is the nearest")
    else:
        out.row(f"{where} ({name})", "removed", "no such reward here; see env.reward in docs/task-stream.md")


def fit_log_prob_micro(ref: dict, base: DictConfig, out: Translation) -> None:
    """Their verl ran a log-prob micro-batch larger than a GPU's share of a step as one chunk; verl 0.9.1 (and our
    check) needs a divisor of that share, which is then the same single chunk."""
    def value(key: str):
        found = OmegaConf.select(OmegaConf.create(ref), key, default=None, throw_on_missing=False)
        return found if found is not None else OmegaConf.select(base, key)

    gpus = int(value("trainer.n_gpus_per_node") or 1) * int(value("trainer.nnodes") or 1)
    sequences = int(value("data.train_batch_size")) * int(value("actor_rollout_ref.rollout.n"))
    if sequences % gpus:
        return  # our batch check says what to change
    for role in ("rollout", "ref"):
        key = f"actor_rollout_ref.{role}.log_prob_micro_batch_size_per_gpu"
        micro = OmegaConf.select(OmegaConf.create(out.config), key, default=None)
        if micro and int(micro) > sequences // gpus:
            out.put(key, sequences // gpus)
            out.rows = [row for row in out.rows if row[0] != key]
            out.row(key, "translated", f"{sequences // gpus}: their {micro} exceeds the {sequences // gpus} "
                                       f"sequences per GPU of a step, which their verl ran as one chunk; verl 0.9.1 "
                                       f"needs a divisor (the same one chunk)")
