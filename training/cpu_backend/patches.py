"""The two places where verl 0.9.1 offers no hook for a CPU run, each replaced by one small named function.

Both are applied only in processes that load the CPU backend (VERL_PLATFORM=cpu) and are pinned by contract tests
(tests/training/cpu_backend/test_cpu_backend.py) that fail when verl changes the code they stand in for:

1. `verl.workers.engine_workers.initialize_global_process_group_ray`: verl builds the backend string
   "cpu:gloo,{device}:{backend}", which on CPU is "cpu:gloo,cpu:gloo" and torch rejects a device named twice.
   Replacement: the same call with backend "gloo".
2. `verl.workers.engine.fsdp.transformer_impl.CPUOffloadPolicy`: forward-only engines (the reference model) get
   `CPUOffloadPolicy(pin_memory=True)`, and pinning host memory needs an accelerator. Replacement: the same policy
   with pin_memory=False (the parameters already live in host memory).

A third entry is data, not code: verl looks the in-worker rollout adapter up in the module-level dict
`verl.workers.rollout.base._ROLLOUT_REGISTRY` keyed by (name, mode); `register_rollout_adapter` adds ours.
"""

from __future__ import annotations

ROLLOUT_ADAPTER = "training.cpu_backend.rollout_adapter.TransformersRolloutAdapter"


def gloo_process_group(timeout_second=None, backend=None):
    """verl's initialize_global_process_group_ray with the one backend a CPU has."""
    from verl.utils.distributed import initialize_global_process_group_ray

    return initialize_global_process_group_ray(timeout_second=timeout_second, backend=backend or "gloo")


def unpinned_cpu_offload_policy(*args, pin_memory: bool = False, **kwargs):
    """torch's CPUOffloadPolicy, never pinned (pinning needs an accelerator)."""
    from torch.distributed.fsdp import CPUOffloadPolicy

    return CPUOffloadPolicy(*args, pin_memory=False, **kwargs)


def apply() -> None:
    """Rebinds the two names above in the verl modules that use them; idempotent."""
    import verl.workers.engine.fsdp.transformer_impl as transformer_impl
    import verl.workers.engine_workers as engine_workers

    engine_workers.initialize_global_process_group_ray = gloo_process_group
    transformer_impl.CPUOffloadPolicy = unpinned_cpu_offload_policy


def register_rollout_adapter(name: str) -> None:
    """Adds the transformers adapter to verl's (name, mode) -> class table for async rollouts."""
    from verl.workers.rollout.base import _ROLLOUT_REGISTRY

    _ROLLOUT_REGISTRY[(name, "async")] = ROLLOUT_ADAPTER


