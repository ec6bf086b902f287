"""Whether this environment can train on the device a run asks for, decided before Ray starts.

What the host has (NVIDIA GPUs and their driver, read from nvidia-smi or /proc/driver/nvidia) is set against what
this environment's torch can use (its CUDA build, the devices it sees). A machine with GPUs that torch cannot use (a
CPU build of torch, a driver too old for torch's CUDA, CUDA_VISIBLE_DEVICES empty by mistake) never trains on the CPU
in silence: the run stops with the reason and the fix. The same reading checks nvcc before a flash-attn build.

    python -m training.launch.devices            # what this machine and environment have, and what would train where
    python -m training.launch.devices nvcc       # exit 1 unless nvcc matches torch's CUDA (make install-flash-attn)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from training.launch.config import listed_devices

# The oldest Linux driver that runs a CUDA major version's builds (NVIDIA's minor-version compatibility floors:
# CUDA 13.x needs the 580 branch, 12.x the 525 branch). PyPI's torch 2.11.0 and vllm 0.24.0 are CUDA 13.0 builds.
MIN_DRIVER = {13: "580.65.06", 12: "525.60.13", 11: "450.80.02"}
FIX_CPU = "or set trainer.device=cpu to train on the CPU backend on purpose"


@dataclass(frozen=True)
class HostGPUs:
    """What the machine has, whatever this environment's torch is."""

    count: int  # NVIDIA GPUs the driver lists
    driver: str | None  # driver version, e.g. "580.65.06"; None when unknown


@dataclass(frozen=True)
class TorchCUDA:
    """What this environment's torch can use."""

    build: str | None  # torch.version.cuda ("13.0"); None for a CPU build
    usable: int  # devices torch can use now (0 when torch.cuda.is_available() is False)
    visible_devices: str | None  # CUDA_VISIBLE_DEVICES as set; None when unset


def parse_nvidia_smi(gpu_list: str, driver_versions: str) -> HostGPUs:
    """Reads `nvidia-smi -L` ("GPU 0: NVIDIA H100 ... (UUID: ...)" per GPU) and
    `nvidia-smi --query-gpu=driver_version --format=csv,noheader` (one version per GPU)."""
    count = sum(1 for line in gpu_list.splitlines() if re.match(r"\s*GPU \d+:", line))
    versions = [v.strip() for v in driver_versions.splitlines() if re.fullmatch(r"\d+(\.\d+)+", v.strip())]
    return HostGPUs(count=count, driver=versions[0] if versions else None)


def parse_proc_driver(version_text: str, gpu_dirs: int) -> HostGPUs:
    """Reads /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06 ...") and the
    number of entries in /proc/driver/nvidia/gpus: the fallback where nvidia-smi is not on PATH."""
    found = re.search(r"Kernel Module\s+(\d+(?:\.\d+)+)", version_text)
    return HostGPUs(count=gpu_dirs, driver=found.group(1) if found else None)


def probe_host(timeout: float = 15.0) -> HostGPUs:
    """Returns the host's NVIDIA GPUs: nvidia-smi when it answers, else /proc/driver/nvidia, else none."""
    if shutil.which("nvidia-smi"):
        try:
            listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=timeout)
            versions = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                      capture_output=True, text=True, timeout=timeout)
            host = parse_nvidia_smi(listed.stdout, versions.stdout)
            if host.count:
                return host
        except (OSError, subprocess.TimeoutExpired):
            pass
    proc = Path("/proc/driver/nvidia")
    if (proc / "version").is_file():
        gpus = proc / "gpus"
        return parse_proc_driver((proc / "version").read_text(errors="replace"),
                                 len(list(gpus.iterdir())) if gpus.is_dir() else 0)
    return HostGPUs(count=0, driver=None)


def probe_torch() -> TorchCUDA:
    """Returns what this environment's torch can use (initialises CUDA only when torch was built with it)."""
    import torch

    build = torch.version.cuda
    usable = torch.cuda.device_count() if build and torch.cuda.is_available() else 0
    return TorchCUDA(build=build, usable=usable, visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def min_driver(cuda_build: str) -> str | None:
    """Returns the oldest driver that runs builds of this CUDA version ("13.0" -> "580.65.06"), None if unknown."""
    return MIN_DRIVER.get(_version(cuda_build)[0]) if _version(cuda_build) else None


def why_unusable(host: HostGPUs, torch_cuda: TorchCUDA) -> str:
    """Says why torch cannot use the host's GPUs, with the fix (the host has GPUs; torch sees none)."""
    gpus = f"this machine has {host.count} NVIDIA GPU(s)" + (f" (driver {host.driver})" if host.driver else "")
    if torch_cuda.build is None:
        return (f"{gpus} but the torch in this environment ({sys.prefix}) is a CPU build: install the GPU environment "
                f"with `make install-gpu` and run with .venv-gpu/bin/python (or `make quickstart DEVICE=gpu`), {FIX_CPU}")
    if torch_cuda.visible_devices is not None and not listed_devices(torch_cuda.visible_devices):
        return (f"{gpus} but CUDA_VISIBLE_DEVICES={torch_cuda.visible_devices!r} hides all of them: unset it or list "
                f"the GPUs to use (CUDA_VISIBLE_DEVICES=0,1), {FIX_CPU}")
    needed = min_driver(torch_cuda.build)
    if needed and host.driver and _version(host.driver) < _version(needed):
        return (f"{gpus}, but torch is built for CUDA {torch_cuda.build}, which needs NVIDIA driver >= {needed}: "
                f"update the driver (docs/install.md says what the pins need), {FIX_CPU}")
    return (f"{gpus} but torch (CUDA {torch_cuda.build} build) can use none of them: "
            f"`python -c 'import torch; torch.cuda.init()'` shows CUDA's own error; {FIX_CPU}")


def device_problem(requested: str, host: HostGPUs, torch_cuda: TorchCUDA) -> str | None:
    """Returns why a run asking for trainer.device=`requested` must not start here, or None when it may.

    auto trains on CUDA when torch can use a GPU and on the CPU backend when the host has none; a host with GPUs
    torch cannot use is refused (never a silent CPU run). cuda needs a usable GPU. cpu is always allowed."""
    if requested == "cpu" or torch_cuda.usable > 0:
        return None
    if requested == "cuda" and host.count == 0:
        return ("trainer.device=cuda but this machine has no NVIDIA GPU (nvidia-smi lists none, no "
                "/proc/driver/nvidia): use trainer.device=auto or trainer.device=cpu")
    if host.count == 0:
        return None  # auto on a machine without GPUs: the CPU backend, as documented
    return f"trainer.device={requested}: {why_unusable(host, torch_cuda)}"


def nvcc_problem(nvcc_version: str | None, torch_cuda_build: str | None) -> str | None:
    """Returns why flash-attn cannot be built here, or None. `nvcc_version` is `nvcc --version`'s output (None when
    nvcc is not found); torch's C++ extensions need nvcc of the same CUDA major version torch was built with."""
    if torch_cuda_build is None:
        return "torch in this environment is a CPU build: run `make install-gpu` first (flash-attn builds against CUDA torch)"
    if nvcc_version is None:
        return (f"nvcc not found: flash-attn compiles against torch's CUDA {torch_cuda_build}; install the CUDA "
                f"{torch_cuda_build.split('.')[0]}.x toolkit (nvcc) and put it on PATH (or set CUDA_HOME)")
    found = re.search(r"release (\d+)\.(\d+)", nvcc_version)
    if not found:
        return f"cannot read nvcc's version from: {nvcc_version.strip()[:200]}"
    if int(found.group(1)) != _version(torch_cuda_build)[0]:
        return (f"nvcc is CUDA {found.group(1)}.{found.group(2)} but torch is built for CUDA {torch_cuda_build}: "
                f"put a CUDA {torch_cuda_build.split('.')[0]}.x nvcc first on PATH (or set CUDA_HOME to that toolkit)")
    return None


def _nvcc_output() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    nvcc = str(Path(home) / "bin" / "nvcc") if home else shutil.which("nvcc")
    if not nvcc or not Path(nvcc).exists():
        return None
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout


def main(argv: list[str]) -> int:
    import torch

    if argv[:1] == ["nvcc"]:
        problem = nvcc_problem(_nvcc_output(), torch.version.cuda)
        print(f"[devices] {problem or 'nvcc matches torch CUDA ' + str(torch.version.cuda)}",
              file=sys.stderr if problem else sys.stdout)
        return 1 if problem else 0
    host, torch_cuda = probe_host(), probe_torch()
    print(f"[devices] host: {host.count} NVIDIA GPU(s), driver {host.driver or '-'}; torch {torch.__version__} "
          f"(CUDA build {torch_cuda.build or 'none: CPU'}) can use {torch_cuda.usable}")
    problem = device_problem("auto", host, torch_cuda)
    print(f"[devices] {problem or 'trainer.device=auto trains on ' + ('cuda' if torch_cuda.usable else 'the CPU backend')}")
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
