"""The CPU backend's platform and patches, without Ray: contract tests against the installed verl, the engine's
single-rank module, registration only on the CPU platform (the sampler and the rollout server: test_sampling.py,
test_rollout_server.py)."""

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = str(Path(__file__).resolve().parents[3])


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


# ---- contract tests: the verl code our two patches and one registry entry stand in for ----

def test_contract_process_group_backend_string():
    """verl builds 'cpu:gloo,{device}:{backend}' (-> 'cpu:gloo,cpu:gloo' on CPU) and TrainingWorker calls it by the
    module-level name we rebind; if either changes, training.cpu_backend.patches must be revisited."""
    import verl.workers.engine_workers as engine_workers
    from verl.utils.distributed import initialize_global_process_group_ray

    assert 'backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in inspect.getsource(
        initialize_global_process_group_ray)
    assert "initialize_global_process_group_ray(timeout_second=None)" in inspect.getsource(
        engine_workers.TrainingWorker.__init__)
    assert "initialize_global_process_group_ray" in vars(engine_workers)


def test_contract_forward_only_engines_pin_memory():
    """verl gives forward-only FSDP2 engines CPUOffloadPolicy(pin_memory=True), looked up as a module global."""
    import verl.workers.engine.fsdp.transformer_impl as transformer_impl

    source = inspect.getsource(transformer_impl.FSDPEngine._build_fsdp_module)
    assert "offload_policy = CPUOffloadPolicy(pin_memory=True)" in source
    assert "CPUOffloadPolicy" in vars(transformer_impl)


def test_contract_rollout_adapter_table():
    """verl builds the in-worker rollout adapter from the (name, mode) table in verl.workers.rollout.base."""
    from verl.workers.rollout import base

    assert isinstance(base._ROLLOUT_REGISTRY, dict) and ("vllm", "async") in base._ROLLOUT_REGISTRY
    assert "_ROLLOUT_REGISTRY[(rollout_name, mode)]" in inspect.getsource(base.get_rollout_class)


def test_contract_verls_fsdp_engine_runs_an_unwrapped_module():
    """The single-rank CPU engine (training/cpu_backend/engine.py) returns the module unwrapped from verl's
    `_build_fsdp_module`; verl's engine must keep handling `fsdp_version(module) == 0` where a run goes: gradient
    clipping, accumulation, moves, the full state dict, forward autocast (skipped for fp32), and must keep building
    the module through that one method."""
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.workers.engine.fsdp.transformer_impl as impl

    assert "module = self._build_fsdp_module(module)" in inspect.getsource(impl.FSDPEngine._build_model_optimizer)
    assert "torch.nn.utils.clip_grad_norm_(" in inspect.getsource(impl.FSDPEngine.optimizer_step)
    assert "else:\n            yield" in inspect.getsource(impl.FSDPEngine._gradient_sync_context)
    for helper in (fsdp_utils.load_fsdp_model_to_gpu, fsdp_utils.offload_fsdp_model_to_cpu,
                   fsdp_utils.get_fsdp_full_state_dict):
        assert "fsdp_version(model) == 0" in inspect.getsource(helper), helper.__name__
    assert 'getattr(self, "_autocast_dtype", torch.bfloat16)' in inspect.getsource(
        impl.FSDPEngineWithLMHead.forward_step)
    assert fsdp_utils.fsdp_version(torch.nn.Linear(1, 1)) == 0


def test_single_rank_engine_unwraps_one_rank_only():
    """One rank without LoRA: the module as loaded (autocast from mixed_precision); two ranks or LoRA: FSDP."""
    from types import SimpleNamespace
    from unittest import mock

    from training.cpu_backend.engine import SingleRankEngineWithLMHead, keeps_plain_module

    assert keeps_plain_module(1, lora=False)
    assert not keeps_plain_module(2, lora=False) and not keeps_plain_module(1, lora=True)
    engine = object.__new__(SingleRankEngineWithLMHead)
    module = torch.nn.Linear(2, 2)
    for precision, dtype in (({"param_dtype": "fp32"}, torch.float32), ({"param_dtype": "bf16"}, torch.bfloat16)):
        engine.engine_config, engine._is_lora = SimpleNamespace(mixed_precision=precision), False
        with mock.patch("torch.distributed.get_world_size", return_value=1):
            assert engine._build_fsdp_module(module) is module
        assert engine._autocast_dtype == dtype and engine.scaler is None
    engine.engine_config = SimpleNamespace(mixed_precision={"param_dtype": "fp16"})
    with mock.patch("torch.distributed.get_world_size", return_value=1), pytest.raises(ValueError, match="fp16"):
        engine._build_fsdp_module(module)
    with mock.patch("torch.distributed.get_world_size", return_value=2), mock.patch(
            "verl.workers.engine.fsdp.transformer_impl.FSDPEngine._build_fsdp_module", return_value="sharded"):
        assert engine._build_fsdp_module(module) == "sharded"


def test_backend_registers_and_patches_only_on_cpu_platform():
    """Importing the backend registers the platform, engine, replica and adapter; patches need VERL_PLATFORM=cpu."""
    code = """
import training.cpu_backend
import verl.workers.engine_workers as ew
from verl.plugin.platform import PlatformRegistry, get_platform
from verl.utils.device import get_device_id, get_device_name, get_torch_device
from verl.workers.engine.base import EngineRegistry
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutReplicaRegistry
assert PlatformRegistry.get("cpu") is not None
print(get_device_name(), get_device_id(), ew.initialize_global_process_group_ray.__module__)
print(EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__ if get_device_name() == "cpu" else "-")
print(RolloutReplicaRegistry.get("transformers").__name__, get_rollout_class("transformers").__name__)
free, total = get_torch_device().mem_get_info()
assert 0 < free <= total
"""
    on_cpu = _run_python(code, VERL_PLATFORM="cpu")
    assert on_cpu.returncode == 0, on_cpu.stderr[-3000:]
    lines = on_cpu.stdout.split("\n")
    assert lines[0] == "cpu cpu training.cpu_backend.patches"
    assert lines[1] == "SingleRankEngineWithLMHead"
    assert lines[2] == "TransformersReplica TransformersRolloutAdapter"
    elsewhere = _run_python("import training.cpu_backend, verl.workers.engine_workers as ew; "
                            "print(ew.initialize_global_process_group_ray.__module__)", VERL_PLATFORM="nvidia")
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    assert elsewhere.stdout.strip() == "verl.utils.distributed"  # unpatched off the CPU platform


def test_gloo_process_group_where_verls_backend_string_fails():
    """Proves the patch is needed and works: torch rejects verl's CPU backend string, ours initialises."""
    code = """
import os, torch.distributed as dist
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29731")
try:
    dist.init_process_group(backend="cpu:gloo,cpu:gloo", rank=0, world_size=1)
    print("verl-string-ok")
except Exception as err:
    print("verl-string-fails")
if dist.is_initialized():
    dist.destroy_process_group()
from training.cpu_backend.patches import gloo_process_group
gloo_process_group()
print(dist.get_backend())
"""
    result = _run_python(code, VERL_PLATFORM="cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["verl-string-fails", "gloo"]
