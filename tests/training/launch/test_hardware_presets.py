"""The one- and two-GPU presets (configs/hardware/1gpu.yaml, 2gpu.yaml) as a GPU user runs them:

    CUDA_VISIBLE_DEVICES=0   python training/train_grpo.py --config-name inter_algorithmic hardware=1gpu preflight=true
    CUDA_VISIBLE_DEVICES=0,1 python training/train_grpo.py --config-name inter_algorithmic hardware=2gpu preflight=true

This machine has no GPU, so the one thing that needs one is replaced: torch's answer to "which CUDA devices can I
use" (training.launch.devices.probe_torch says a CUDA 13 build sees the devices CUDA_VISIBLE_DEVICES lists).
Everything else is what runs on theirs: the composed config, then `training.train_grpo.run` (what the command calls
once hydra has composed it): the device choice, the batch arithmetic and GPU checks, the attention choice, Ray's
sizing, the preflight on CPU. The model is the tiny one at the preset's micro-batch sizes (the 3B
weights are not here) and prompts may be longer (its tokenizer is less efficient).
"""

import importlib.util
from pathlib import Path

import pytest

from training.launch.config import compose_config
from training.launch.devices import TorchCUDA

CONFIG = "inter_algorithmic"  # Qwen2.5-3B: 32 prompts x 8 samples, mini-batches of 16 prompts, micro-batches of 4
SMALL = ["data.max_prompt_length=2048", "env.validation_size=2", "env.preflight.prompts=2", "env.preflight.samples=2",
         "env.preflight.max_new_tokens=8", "env.preflight.length_check_items=8"]
PLANS = {
    "1gpu": "32 prompts x 8 samples = 256 sequences per step on 1 device(s); 2 optimizer update(s) per step of 16 "
            "prompts (128 sequences per device, 32 micro-batch(es) of 4)",
    "2gpu": "32 prompts x 8 samples = 256 sequences per step on 2 device(s); 2 optimizer update(s) per step of 16 "
            "prompts (64 sequences per device, 16 micro-batch(es) of 4)",
}


def visible_cuda(monkeypatch, devices: str) -> None:
    """CUDA_VISIBLE_DEVICES=`devices`, and torch (a CUDA 13 build) able to use exactly those."""
    import training.train_grpo

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", devices)
    monkeypatch.setattr(training.train_grpo, "probe_torch",
                        lambda: TorchCUDA(build="13.0", usable=len(devices.split(",")), visible_devices=devices))


def overrides(hardware: str, tiny_model_dir: Path, tmp_path: Path) -> list[str]:
    return [f"hardware={hardware}", f"actor_rollout_ref.model.path={tiny_model_dir}", *SMALL,
            f"trainer.default_local_dir={tmp_path}"]


@pytest.mark.parametrize("hardware,devices", [("1gpu", "0"), ("2gpu", "0,1")])
def test_preset_preflight_on_its_gpus(hardware, devices, tiny_model_dir, tmp_path, monkeypatch, capsys):
    from training.train_grpo import run

    visible_cuda(monkeypatch, devices)
    cfg = compose_config(CONFIG, [*overrides(hardware, tiny_model_dir, tmp_path), "preflight=true"])
    assert run(cfg) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"[check] device: cuda; batch: {PLANS[hardware]}" in out
    assert "[check] attention: " in out and "[check] CPU backend" not in out and "all checks passed" in out
    assert cfg.trainer.n_gpus_per_node == len(devices.split(",")) and cfg.trainer.device == "cuda"
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1  # one vLLM replica per GPU
    assert cfg.ray_kwargs.ray_init.num_cpus >= 2 + 8 + 8 + 4 + 3 * len(devices.split(","))


def test_two_gpu_preset_with_one_visible_gpu_is_refused_with_the_fix(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from training.train_grpo import run

    visible_cuda(monkeypatch, "0")
    assert run(compose_config(CONFIG, [*overrides("2gpu", tiny_model_dir, tmp_path), "preflight=true"])) == 2
    err = capsys.readouterr().err
    assert "trainer.n_gpus_per_node=2 but only 1 GPU(s) are visible" in err and "hardware=auto" in err
    assert "nothing was started" in err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_training_on_the_gpus_without_the_gpu_stack_stops_before_ray(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """The same command without preflight=true in the CPU environment: every check passes but the rollout engine's."""
    from training.train_grpo import run

    visible_cuda(monkeypatch, "0,1")
    assert run(compose_config(CONFIG, overrides("2gpu", tiny_model_dir, tmp_path))) == 2
    err = capsys.readouterr().err
    assert "1 problem(s)" in err and "vllm is not installed" in err and "make install-gpu" in err
