"""The README's install works on a user's machine, not only on ours (whose pip is configured with local wheels).

- The Makefile refuses an interpreter verl cannot run on before anything is downloaded, and picks a suitable one.
- Its install takes torch alone from PyPI's CPU index and everything else from the lock.
- The locks resolve with pip's default settings (`pip --isolated`: no machine config) from PyPI alone, for the
  Python versions the README names. These need the registry and are skipped, saying so, where pypi.org is out of reach.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MAKE = shutil.which("make")


def make(*args, env=None):
    return subprocess.run([MAKE, "-s", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env or os.environ, timeout=120)


def fake_python(folder: Path, name: str, version: str) -> Path:
    """An interpreter that says it is `version` (what the Makefile asks it) and can do nothing else."""
    path = folder / name
    path.write_text(f"#!/bin/sh\necho {version}\n")
    path.chmod(0o755)
    return path


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_a_python_313_is_refused_before_any_download_with_what_to_do(tmp_path):
    venv = tmp_path / "venv"
    done = make("install", f"VENV={venv}", f"PYTHON={fake_python(tmp_path, 'python3.13', '3.13')}")
    assert done.returncode != 0
    assert "is Python 3.13; this project needs Python 3.11 or 3.12" in done.stderr
    assert "make PYTHON=python3.12 install" in done.stderr
    assert not venv.exists()  # refused before the venv and any download


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_a_suitable_interpreter_is_picked_when_python3_is_313(tmp_path):
    """python3 is 3.13 (Debian 13, Fedora 41+): the Makefile uses python3.11 from PATH instead."""
    fake_python(tmp_path, "python3", "3.13")
    (tmp_path / "python3.11").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    env.pop("PYTHON", None)
    assert make("check-python", env=env).returncode == 0
    plan = make("-n", "-B", "install", "VENV=/nonexistent/venv", env=env).stdout
    assert "python3.11 -m venv --clear /nonexistent/venv" in plan


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_make_install_takes_torch_alone_from_the_cpu_index():
    plan = make("-n", "-B", "install", "VENV=/nonexistent/venv").stdout.splitlines()
    torch_lines = [line for line in plan if TORCH_CPU_INDEX in line]
    assert len(torch_lines) == 1, plan
    assert re.search(r"pip install .*--no-deps .*--extra-index-url https://download.pytorch.org/whl/cpu "
                     r"torch==2\.13\.0\+cpu$", torch_lines[0])
    lock_line = next(i for i, line in enumerate(plan) if "-r requirements.lock" in line)
    assert plan.index(torch_lines[0]) < lock_line and "--no-deps" in plan[lock_line]
    assert TORCH_CPU_INDEX in (ROOT / "evaluation" / "install_vllm_cpu.sh").read_text()


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def resolve_isolated(lock: Path, tmp_path: Path, *target: str) -> list[dict]:
    """Resolves every pin of `lock` but the CPU torch build with stock pip (no config, PyPI only); returns pip's
    report of what it would install."""
    import json

    pins = [line for line in lock.read_text().splitlines() if re.match(r"^[A-Za-z0-9]", line)]
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("\n".join(p for p in pins if not p.startswith("torch==2.13.0+cpu")) + "\n")
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--no-deps",
                           "--ignore-installed", "-q", *target, "-r", str(reqs), "--report", str(report)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    installs = json.loads(report.read_text())["install"]
    assert len(installs) == len(reqs.read_text().split()), "pip resolved another number of packages than pinned"
    hosts = {re.sub(r"^https?://([^/]+)/.*", r"\1", i["download_info"]["url"]) for i in installs}
    assert hosts == {"files.pythonhosted.org"}, hosts  # PyPI's file host, nothing from this machine
    return installs


def linux(python: str) -> list[str]:
    """pip's target options for Linux x86_64 with glibc <= 2.31 (the README's floor) and `python`."""
    return ["--python-version", python, "--platform", "linux_x86_64", "--platform", "manylinux2014_x86_64",
            *[arg for n in range(17, 32) for arg in ("--platform", f"manylinux_2_{n}_x86_64")]]


@pytest.mark.slow
@pytest.mark.skipif(not pypi_reachable(), reason="pypi.org cannot be reached from here")
@pytest.mark.parametrize("target", [[], linux("3.12")], ids=["python3.11", "python3.12"])
def test_the_cpu_lock_resolves_from_pypi_alone(tmp_path, target):
    installs = resolve_isolated(ROOT / "requirements.lock", tmp_path, *target)
    assert not any(i["metadata"]["name"].lower() == "torch" for i in installs)


@pytest.mark.slow
@pytest.mark.skipif(not pypi_reachable(), reason="pypi.org cannot be reached from here")
@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_gpu_lock_resolves_from_pypi_alone_and_is_cuda_13(tmp_path, python):
    installs = resolve_isolated(ROOT / "requirements-gpu.lock", tmp_path, *linux(python))
    torch = next(i for i in installs if i["metadata"]["name"].lower() == "torch")
    needs = " ".join(torch["metadata"].get("requires_dist", []))
    # the fact behind the README's driver requirement (>= 580): PyPI's torch 2.11.0 is a CUDA 13.0 build
    assert "cuda-toolkit" in needs and "13.0" in needs and "cu13" in needs, needs
