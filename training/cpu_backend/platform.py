"""A "cpu" platform for verl's PlatformRegistry: verl's device calls, answered by the host.

verl reaches the device through `get_platform()`: `device_module` must look like `torch.cuda` (synchronize,
empty_cache, memory statistics, streams, RNG state, mem_get_info). Collectives run on gloo. verl's resource
pools count only Ray resources named GPU or NPU, so each training rank takes one logical "GPU" slot that the
driver declares to Ray (`ray_init.num_gpus`); nothing touches CUDA, the name is a scheduling label.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any, Optional

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


def host_memory() -> tuple[int, int]:
    """Returns (available, total) bytes of host memory from /proc/meminfo (psutil-free)."""
    fields = {}
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            key, value = line.split(":", 1)
            fields[key] = int(value.split()[0]) * 1024
    return fields.get("MemAvailable", fields["MemFree"]), fields["MemTotal"]


def _process_rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _CPUDeviceModule(types.ModuleType):
    """`torch.cpu` plus the `torch.cuda`-style calls verl makes; memory figures come from the host."""

    def __init__(self):
        super().__init__("verl_cpu_device")
        self._peak = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    def empty_cache(self) -> None:
        return None

    def ipc_collect(self) -> None:
        return None

    def set_per_process_memory_fraction(self, fraction: float, device: Any = None) -> None:
        return None

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        return host_memory()

    def memory_allocated(self, device: Any = None) -> int:
        rss = _process_rss()
        self._peak = max(self._peak, rss)
        return rss

    memory_reserved = memory_allocated

    def max_memory_allocated(self, device: Any = None) -> int:
        return max(self._peak, self.memory_allocated())

    max_memory_reserved = max_memory_allocated

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        self._peak = 0

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_device_name(self, device: Any = None) -> str:
        return "cpu"

    def current_device(self) -> str:
        return "cpu"

    def is_available(self) -> bool:
        return True


CPU_DEVICE_MODULE = _CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class CPUPlatform(PlatformBase):
    """verl's device layer on a plain CPU: device "cpu", gloo collectives, logical "GPU" slots for Ray."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Chosen by VERL_PLATFORM=cpu only: auto-detection must keep picking a real accelerator where there is one.
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:
        # verl moves tensors with `.to(get_device_id())`; an int would mean an accelerator index, "cpu" means here
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # a logical slot per training rank (see the module docstring)

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False  # verl's vLLM weight sync then sends buckets through POSIX shared memory

    def rollout_env_vars(self) -> dict[str, str]:
        # vLLM's CPU engine: a KV cache in GiB (its default sizes it from the host's memory) and no thread pinning
        # (the cores are shared with the trainer's processes)
        return {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
                "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind")}

    def cudart(self) -> Any:
        return None
