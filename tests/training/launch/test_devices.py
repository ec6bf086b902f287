"""A run never trains on another device than it asked for without saying so (training/launch/devices.py).

The detection functions are fed the real formats of nvidia-smi, /proc/driver/nvidia and nvcc; the end-to-end cases run
training/train_grpo.py with a fake nvidia-smi first on PATH and check it stops before Ray with the fix."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from training.launch.devices import (
    HostGPUs,
    TorchCUDA,
    device_problem,
    min_driver,
    nvcc_problem,
    parse_nvidia_smi,
    parse_proc_driver,
    probe_host,
)

ROOT = Path(__file__).resolve().parents[3]
SMI_LIST = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c3f7e-1d2b-4c9a-9a7e-0c1d2e3f4a5b)\n"
            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-6a1d4e8f-2e3c-5dab-ab8f-1d2e3f4a5b6c)\n")
CPU_TORCH = TorchCUDA(build=None, usable=0, visible_devices=None)
CUDA13_TORCH_NO_GPU = TorchCUDA(build="13.0", usable=0, visible_devices=None)


def test_reads_nvidia_smi_and_proc_driver():
    assert parse_nvidia_smi(SMI_LIST, "580.65.06\n580.65.06\n") == HostGPUs(count=2, driver="580.65.06")
    assert parse_nvidia_smi("No devices were found\n", "") == HostGPUs(count=0, driver=None)
    version = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\n"
               "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    assert parse_proc_driver(version, 4) == HostGPUs(count=4, driver="535.104.05")


def test_driver_floors_follow_the_cuda_major_version():
    assert min_driver("13.0") == "580.65.06" and min_driver("12.8") == "525.60.13" and min_driver("9.0") is None


def test_auto_on_a_gpu_machine_with_cpu_torch_is_refused_with_the_fix():
    problem = device_problem("auto", HostGPUs(2, "580.65.06"), CPU_TORCH)
    assert "2 NVIDIA GPU(s)" in problem and "CPU build" in problem
    assert "make install-gpu" in problem and "trainer.device=cpu" in problem


def test_auto_with_a_driver_too_old_for_torchs_cuda_names_the_driver_needed():
    problem = device_problem("auto", HostGPUs(1, "535.104.05"), CUDA13_TORCH_NO_GPU)
    assert "driver 535.104.05" in problem and "CUDA 13.0" in problem and ">= 580.65.06" in problem
    assert "trainer.device=cpu" in problem


def test_auto_with_cuda_visible_devices_empty_says_it_hides_the_gpus():
    torch_cuda = TorchCUDA(build="13.0", usable=0, visible_devices="")
    problem = device_problem("auto", HostGPUs(2, "580.65.06"), torch_cuda)
    assert "CUDA_VISIBLE_DEVICES=''" in problem and "hides all of them" in problem


def test_cuda_without_a_gpu_is_refused_and_the_usual_cases_pass():
    assert "no NVIDIA GPU" in device_problem("cuda", HostGPUs(0, None), CPU_TORCH)
    assert "CPU build" in device_problem("cuda", HostGPUs(1, "580.65.06"), CPU_TORCH)
    usable = TorchCUDA(build="13.0", usable=2, visible_devices=None)
    assert device_problem("auto", HostGPUs(2, "580.65.06"), usable) is None
    assert device_problem("cuda", HostGPUs(2, "580.65.06"), usable) is None
    assert device_problem("auto", HostGPUs(0, None), CPU_TORCH) is None  # the CPU backend, as documented
    assert device_problem("cpu", HostGPUs(2, "580.65.06"), CPU_TORCH) is None  # on purpose


def test_nvcc_must_match_torchs_cuda_major_version():
    nvcc13 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"
    nvcc12 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\n"
    assert nvcc_problem(nvcc13, "13.0") is None
    assert "nvcc is CUDA 12.4 but torch is built for CUDA 13.0" in nvcc_problem(nvcc12, "13.0")
    assert "nvcc not found" in nvcc_problem(None, "13.0") and "13.x" in nvcc_problem(None, "13.0")
    assert "CPU build" in nvcc_problem(nvcc13, None)


@pytest.fixture
def fake_nvidia_smi(tmp_path):
    """A PATH whose nvidia-smi answers like a 2-GPU machine with driver 535 (the binary's real output format)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   'case "$1" in -L) printf "%s" "$SMI_LIST";; *) printf "535.104.05\\n535.104.05\\n";; esac\n')
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "SMI_LIST": SMI_LIST}


def test_probe_host_runs_nvidia_smi(fake_nvidia_smi, monkeypatch):
    monkeypatch.setenv("PATH", fake_nvidia_smi["PATH"])
    monkeypatch.setenv("SMI_LIST", SMI_LIST)
    assert probe_host() == HostGPUs(count=2, driver="535.104.05")


def run_train(env, *overrides):
    started = time.monotonic()
    done = subprocess.run([sys.executable, "training/train_grpo.py", "--config-name", "quickstart", "model=tiny",
                           *overrides], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return done, time.monotonic() - started


def test_train_grpo_stops_before_ray_on_a_gpu_machine_with_cpu_torch(fake_nvidia_smi):
    """`make quickstart DEVICE=cpu`'s environment (CPU torch) started on a GPU machine with trainer.device=auto."""
    import torch

    if torch.version.cuda:
        pytest.skip("this environment's torch is a CUDA build")
    done, seconds = run_train(fake_nvidia_smi)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "2 NVIDIA GPU(s) (driver 535.104.05)" in done.stderr and "make install-gpu" in done.stderr
    assert "trainer.device=cpu" in done.stderr
    assert "Started a local Ray instance" not in done.stdout + done.stderr and seconds < 60


def test_train_grpo_refuses_cuda_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is usable here")
    env = {**os.environ, "PATH": "/usr/bin:/bin"}  # no nvidia-smi
    done, seconds = run_train(env, "trainer.device=cuda")
    assert done.returncode == 2 and "trainer.device=cuda but this machine has no NVIDIA GPU" in done.stderr
    assert "Started a local Ray instance" not in done.stdout + done.stderr and seconds < 60


def test_a_run_joining_a_ray_cluster_is_not_held_to_the_drivers_devices(monkeypatch):
    """The driver of a multi-node GPU run may sit on a head node without GPUs (docs/faults.md: multi-node)."""
    from training.launch.config import compose_config
    from training.train_grpo import run

    cfg = compose_config("quickstart", ["model=tiny", "trainer.device=cuda",
                                        "+ray_kwargs.ray_init.address=127.0.0.1:9"])
    monkeypatch.setattr("training.train_grpo.prepare", lambda *a: (_ for _ in ()).throw(RuntimeError("reached")))
    with pytest.raises(RuntimeError, match="reached"):  # past the local device check, to the config checks
        run(cfg)
