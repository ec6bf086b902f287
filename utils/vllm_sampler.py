"""Which top-k/top-p sampler vLLM uses on CUDA, decided before its engine starts.

vLLM's CUDA sampler imports flashinfer when its engine starts unless VLLM_USE_FLASHINFER_SAMPLER=0, and the engine
dies with `ModuleNotFoundError: No module named 'flashinfer'` where flashinfer is not installed (seen on an H100:
BENCHMARKS.md "GPU"). requirements-gpu.lock installs flashinfer; an environment
without it (the GPU kit's core tier, a hand-built one) samples with vLLM's own PyTorch sampler instead, which draws
from the same distribution. A value the user set is kept.
"""

from __future__ import annotations

import importlib.util
import os

FLAG = "VLLM_USE_FLASHINFER_SAMPLER"


def sampler_env() -> tuple[dict[str, str], str]:
    """Returns (the variables every vLLM process needs, a description for the console)."""
    if FLAG in os.environ:
        return {}, f"as set ({FLAG}={os.environ[FLAG]})"
    if importlib.util.find_spec("flashinfer") is not None:
        return {}, "flashinfer"
    return {FLAG: "0"}, f"PyTorch's (flashinfer is not installed, so {FLAG}=0)"


def apply_in_this_process() -> str:
    """Sets the variables for vLLM engines this process starts (their workers inherit them); returns the description."""
    values, description = sampler_env()
    os.environ.update(values)
    return description
