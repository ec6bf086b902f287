"""Device choice, the CPU backend's config, CPU-only overrides, Ray sizing and the GPU-stack message."""

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from training.launch.config import compose_config, resolve_config
from training.launch.hardware import (
    activate_cpu_backend,
    apply_cpu_backend,
    apply_cpu_overrides,
    choose_attention,
    choose_vllm_sampler,
    flash_attn_2_installed,
    gpu_stack_problems,
    ray_cpu_demand,
    resolve_device,
    size_ray,
)

BACKEND_ENV = ("VERL_PLATFORM", "VERL_USE_EXTERNAL_MODULES", "OMP_NUM_THREADS", "RG_GRPO_ROLLOUT_THREADS",
               "TOKENIZERS_PARALLELISM")


@pytest.fixture()
def isolated_backend(monkeypatch):
    """apply_cpu_backend sets environment variables and verl's platform: restore both after the test."""
    from verl.plugin.platform import platform_manager

    for key in BACKEND_ENV:
        monkeypatch.setenv(key, os.environ.get(key, ""))
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # popped by apply_cpu_backend
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ["CUDA_VISIBLE_DEVICES"])
    monkeypatch.setattr(platform_manager, "_current_platform", platform_manager._current_platform)


def test_auto_device_follows_visible_gpus():
    cfg = compose_config("quickstart")
    assert cfg.trainer.device == "auto"
    assert resolve_device(cfg.copy(), 0) == "cpu" and resolve_device(cfg.copy(), 2) == "cuda"
    assert resolve_device(compose_config("quickstart", ["trainer.device=cpu"]), 1) == "cpu"
    with pytest.raises(ValueError, match="trainer.device='tpu'"):
        resolve_device(compose_config("quickstart", ["trainer.device=tpu"]), 0)


def test_cpu_backend_config(isolated_backend):
    cfg = resolve_config(compose_config("quickstart", ["model=tiny", "trainer.n_gpus_per_node=2"]), gpu_count=1)
    apply_cpu_overrides(cfg)
    apply_cpu_backend(cfg)
    assert os.environ.get("VERL_USE_EXTERNAL_MODULES", "") != "training.cpu_backend"  # config only, no side effects
    activate_cpu_backend(cfg)
    arr = cfg.actor_rollout_ref
    assert cfg.trainer.device == "cpu" and arr.rollout.name == "transformers"
    assert arr.actor.strategy == arr.ref.strategy == "fsdp2"
    assert OmegaConf.to_container(arr.actor.fsdp_config.mixed_precision)["param_dtype"] == "fp32"
    assert arr.model.override_config.attn_implementation == "sdpa" and not arr.model.use_remove_padding
    assert arr.actor.optim.override_optimizer_config == {"foreach": True}  # the loop's numbers, grouped kernels
    assert cfg.ray_kwargs.ray_init.num_gpus == 2  # one logical slot per training rank
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM == "cpu"
    assert os.environ["VERL_USE_EXTERNAL_MODULES"] == "training.cpu_backend"
    from verl.utils.device import get_device_name

    assert get_device_name() == "cpu"


def test_cpu_backend_leaves_the_users_optimizer_choice(isolated_backend):
    """foreach is the CPU default for torch's AdamW; a user's fused (or foreach=false) or another optimizer wins."""
    for given, expected in (({"fused": True}, {"fused": True}), ({"foreach": False}, {"foreach": False}),
                            ({"amsgrad": True}, {"amsgrad": True, "foreach": True})):
        cfg = resolve_config(compose_config("quickstart", ["model=tiny"]), gpu_count=0)
        cfg.actor_rollout_ref.actor.optim.override_optimizer_config = given
        apply_cpu_backend(cfg)
        assert OmegaConf.to_container(cfg.actor_rollout_ref.actor.optim.override_optimizer_config) == expected
    cfg = resolve_config(compose_config("quickstart", ["model=tiny"]), gpu_count=0)
    cfg.actor_rollout_ref.actor.optim.optimizer_impl = "torchao.optim"
    apply_cpu_backend(cfg)
    assert not cfg.actor_rollout_ref.actor.optim.get("override_optimizer_config")


def test_cpu_backend_merges_lora_adapters_before_each_sync():
    """The transformers rollout takes full tensors (it refuses adapters): verl merges them for it (lora.merge)."""
    lora = resolve_config(compose_config("lora_algorithmic", ["model=tiny"]), gpu_count=1)
    apply_cpu_backend(lora)
    assert lora.actor_rollout_ref.model.lora.merge is True
    full = resolve_config(compose_config("quickstart", ["model=tiny"]), gpu_count=1)
    apply_cpu_backend(full)
    assert not full.actor_rollout_ref.model.lora.merge


def test_cpu_overrides_yield_to_the_command_line():
    cfg = compose_config("quickstart")
    applied = apply_cpu_overrides(cfg, command_line={"actor_rollout_ref.rollout.n"})
    assert "actor_rollout_ref.rollout.n" not in applied and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.data.max_response_length == 32 and applied["data.max_response_length"] == 32
    assert cfg.algorithm.rollout_correction.bypass_mode  # from the base config's on_cpu, merged with quickstart's
    bad = compose_config("quickstart", ["+env.on_cpu={data.no_such_key: 1}"])
    with pytest.raises(ValueError, match="env.on_cpu.data.no_such_key: no such config key"):
        apply_cpu_overrides(bad)


def test_ray_is_sized_from_what_verls_actors_reserve():
    cfg = resolve_config(compose_config("quickstart", ["hardware=2gpu"]), gpu_count=2)
    demand = ray_cpu_demand(cfg)
    assert demand == 2 + 8 + 8 + 4 + 3 * 2  # runner + TQ controller, 8 storage units, agent and reward workers, GPUs
    assert size_ray(cfg) == [] and cfg.ray_kwargs.ray_init.num_cpus >= demand
    assert cfg.ray_kwargs.ray_init.address == "local"  # its own cluster, not one `ray start` left on the machine
    small = resolve_config(compose_config("quickstart", ["hardware=2gpu", "+ray_kwargs.ray_init.num_cpus=8"]),
                           gpu_count=2)
    [problem] = size_ray(small)
    assert "ray_kwargs.ray_init.num_cpus=8" in problem and f"num_cpus={demand}" in problem
    remote = resolve_config(compose_config("quickstart", ["+ray_kwargs.ray_init.address=127.0.0.1:1",
                                                          "+ray_kwargs.ray_init.num_cpus=1"]), gpu_count=1)
    [problem] = size_ray(remote)  # joining: no local sizing, and the cluster's own resources are checked
    assert remote.ray_kwargs.ray_init.num_cpus is None and "no Ray cluster answers at 127.0.0.1:1" in problem


def test_gpu_machine_without_the_gpu_stack_is_told_what_to_install():
    import importlib.util

    from training.launch.hardware import vllm_cpu_build

    if importlib.util.find_spec("vllm") is not None and not vllm_cpu_build():
        pytest.skip("vLLM's CUDA build is installed here")
    [problem] = gpu_stack_problems(compose_config("quickstart"))
    # the CPU environment carries vLLM's CPU build (verl's rollout on the CPU backend): not a GPU stack
    missing = "vllm is not installed" if importlib.util.find_spec("vllm") is None else "vLLM is its CPU build"
    assert missing in problem and "make install-gpu" in problem and "trainer.device=cpu" in problem


def test_train_grpo_refuses_a_cuda_run_without_the_gpu_stack(capsys):
    """What `make quickstart` prints on a GPU machine before `make install-gpu`: exit 2, no Ray started."""
    import importlib.util

    from training.launch.hardware import vllm_cpu_build
    from training.train_grpo import ConfigProblem, prepare

    if importlib.util.find_spec("vllm") is not None and not vllm_cpu_build():
        pytest.skip("vLLM's CUDA build is installed here")
    with pytest.raises(ConfigProblem, match="make install-gpu"):
        prepare(compose_config("quickstart", ["model=tiny", "data.max_prompt_length=768"]), visible_gpus=1)


def test_vllm_samples_with_pytorch_without_flashinfer(monkeypatch):
    """vLLM's CUDA engine dies at start importing flashinfer for its sampler unless told not to (H100, 2026-11-26):
    without flashinfer every Ray worker gets VLLM_USE_FLASHINFER_SAMPLER=0; a value the user set is kept."""
    import importlib.util

    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER", raising=False)
    real_find_spec = importlib.util.find_spec
    for installed in (False, True):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: (object() if installed else None) if name == "flashinfer"
                            else real_find_spec(name, *a))
        cfg = compose_config("quickstart")
        described = choose_vllm_sampler(cfg)
        env_vars = cfg.ray_kwargs.ray_init.get("runtime_env", {}).get("env_vars") or {}
        assert (described, env_vars.get("VLLM_USE_FLASHINFER_SAMPLER")) == (
            ("flashinfer", None) if installed else ("PyTorch's (flashinfer is not installed, so "
                                                    "VLLM_USE_FLASHINFER_SAMPLER=0)", "0"))
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    cfg = compose_config("quickstart")
    assert choose_vllm_sampler(cfg) == "as set (VLLM_USE_FLASHINFER_SAMPLER=1)"
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in (cfg.ray_kwargs.ray_init.get("runtime_env", {}).get("env_vars") or {})
    assert choose_vllm_sampler(compose_config("quickstart", ["actor_rollout_ref.rollout.name=transformers"])) is None


def test_attention_defaults_to_sdpa_without_flash_attn():
    cfg = compose_config("quickstart")
    expected = "flash_attention_2" if flash_attn_2_installed() else "sdpa"
    assert choose_attention(cfg) == expected == cfg.actor_rollout_ref.model.override_config.attn_implementation
    chosen = compose_config("quickstart", ["+actor_rollout_ref.model.override_config.attn_implementation=eager"])
    assert choose_attention(chosen) == "eager"
    # Without flash-attn's varlen kernels a packed micro-batch attends over a dense block mask: train padded.
    assert cfg.actor_rollout_ref.model.use_remove_padding is (expected == "flash_attention_2")
    assert chosen.actor_rollout_ref.model.use_remove_padding is False


def fake_distribution(site, name: str, version: str, files: dict[str, str]) -> None:
    """A distribution installed into `site` as pip leaves one: its files and a dist-info naming them."""
    for path, text in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("".join(f"{path},,\n" for path in files))


def test_flash_attn_4_alone_is_not_taken_for_flash_attn_2(tmp_path, monkeypatch):
    """flash-attn-4 installs `flash_attn/cute/` only: `flash_attn` imports (a namespace package) but has no flash-attn 2
    kernels, so the run stays on sdpa, padded; flash-attn 2's own distribution chooses it."""
    import importlib.util

    site = tmp_path / "site"
    fake_distribution(site, "flash-attn-4", "4.0.0b9", {"flash_attn/cute/__init__.py": ""})
    monkeypatch.syspath_prepend(str(site))
    assert importlib.util.find_spec("flash_attn") is not None and not flash_attn_2_installed()
    cfg = compose_config("quickstart")
    assert choose_attention(cfg) == "sdpa" and cfg.actor_rollout_ref.model.use_remove_padding is False
    fake_distribution(site, "flash_attn", "2.8.3", {"flash_attn/__init__.py": "", "flash_attn/bert_padding.py": ""})
    assert flash_attn_2_installed()
    cfg = compose_config("quickstart")
    assert choose_attention(cfg) == "flash_attention_2" and cfg.actor_rollout_ref.model.use_remove_padding is True


def test_cpu_threads_follow_the_process_affinity():
    """`taskset -c 0 python training/train_grpo.py ...` must train on one thread, not on the machine's core count."""
    import subprocess
    import sys

    code = "from training.launch.hardware import cpu_threads, usable_cores; print(usable_cores(), cpu_threads(1), cpu_threads(2))"
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(Path(__file__).resolve().parents[3]), check=True)
    assert done.stdout.split() == ["1", "1", "1"]
