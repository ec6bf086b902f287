"""Stage a: what the machine and the Python running this are: GPUs and driver (nvidia-smi), torch and CUDA, the
packages the GPU path uses, the tools a source build would need, and the full package list.

    python3 -m gpu_kit.machine --out DIR          # the image's Python: machine.json, image-freeze.txt, nvidia-smi.txt
    .venv-kit/bin/python -m gpu_kit.machine --kit --out DIR   # the kit's venv: versions and imports of the stack

Stdlib only, besides torch and the packages it reports on; a missing tool or package is recorded, never fatal.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

STACK = ("torch", "triton", "transformers", "tokenizers", "numpy", "verl", "vllm", "ray", "tensordict",
         "transferqueue", "reasoning-gym", "hydra-core", "flash-attn", "flashinfer-python", "nvidia-cutlass-dsl",
         "xgrammar", "setuptools", "pip")
IMPORTS = ("torch", "verl", "ray", "vllm", "transformers", "flash_attn", "flashinfer")


def command_output(command: list[str], timeout: int = 60) -> str:
    """A command's stdout (or why there is none)."""
    if shutil.which(command[0]) is None and not Path(command[0]).exists():
        return f"{command[0]}: not found"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as err:
        return f"{' '.join(command)}: {err}"
    return (done.stdout + (done.stderr if done.returncode else "")).strip()


def versions() -> dict[str, str | None]:
    found = {}
    for name in STACK:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def torch_facts() -> dict:
    try:
        import torch
    except Exception as err:  # noqa: BLE001 - an image without a working torch is a finding, not a crash
        return {"error": f"{type(err).__name__}: {err}"}
    facts = {"version": torch.__version__, "file": torch.__file__, "cuda": torch.version.cuda,
             "cuda_available": torch.cuda.is_available(), "devices": torch.cuda.device_count()}
    if facts["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        facts.update(name=props.name, capability=list(torch.cuda.get_device_capability(0)),
                     memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
                     cudnn=torch.backends.cudnn.version(), bf16=torch.cuda.is_bf16_supported())
        started = time.time()
        x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        (x @ x).sum().item()
        facts["first_matmul_s"] = round(time.time() - started, 2)
    return facts


def import_times() -> dict[str, str]:
    """Seconds each import of the GPU path takes here, or the error it raises."""
    found = {}
    for module in IMPORTS:
        started = time.time()
        try:
            importlib.import_module(module)
            found[module] = f"{time.time() - started:.1f} s"
        except Exception as err:  # noqa: BLE001 - recorded: which import fails is the finding
            found[module] = f"{type(err).__name__}: {str(err)[:300]}"
    return found


def machine_facts() -> dict:
    memory = Path("/proc/meminfo").read_text().splitlines()[0] if Path("/proc/meminfo").exists() else ""
    disk = shutil.disk_usage(".")
    return {"python": sys.version, "executable": sys.executable, "prefix": sys.prefix,
            "platform": platform.platform(), "libc": " ".join(platform.libc_ver()), "cpus": os.cpu_count(),
            "memory": memory, "disk_free_gib": round(disk.free / 2**30, 1),
            "nvidia_smi": command_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                                          "--format=csv,noheader"]),
            "nvcc": command_output(["nvcc", "--version"]).splitlines()[-1:],
            "gcc": command_output(["gcc", "--version"]).splitlines()[:1],
            "pip": command_output([sys.executable, "-m", "pip", "--version"]),
            "venv_without_pip": command_output([sys.executable, "-c", "import venv; print('venv module: yes')"]),
            "ensurepip": command_output([sys.executable, "-c", "import ensurepip; print(ensurepip.version())"])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m gpu_kit.machine", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kit", action="store_true", help="the kit's venv: versions and imports, no freeze")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    facts = {"versions": versions(), "torch": torch_facts()}
    if args.kit:
        facts["imports"] = import_times()
    else:
        facts["machine"] = machine_facts()
        (args.out / "nvidia-smi.txt").write_text(command_output(["nvidia-smi"]) + "\n")
        freeze = command_output([sys.executable, "-m", "pip", "list", "--format=freeze"], timeout=300)
        (args.out / "image-freeze.txt").write_text(freeze + "\n")
    (args.out / "machine.json").write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps(facts, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
