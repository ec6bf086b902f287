"""verl's vLLM rollout on vLLM's CPU build, with the one piece a CPU cannot run as a GPU does replaced.

Everything a GPU run uses runs here: verl's `vLLMReplica` starts verl's `vLLMHttpServer` (vLLM's AsyncLLM and
OpenAI server), the agent loop samples through it, the actor's `ServerAdapter` syncs weights after every update
through verl's bucketed sender and `vLLMColocateWorkerExtension.update_weights_from_ipc` (over POSIX shared memory:
the CPU platform reports no CUDA IPC, verl's own fallback).

The piece replaced: after loading, vLLM's CPU build packs every linear layer's weight for its GEMM kernel (oneDNN or
AMX) and drops the weight parameter (`UnquantizedLinearMethod.process_weights_after_loading` ->
`dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`); the next weight sync then fails in `load_weights`
("'Parameter' object has no attribute 'weight_loader'"). On a GPU the method does nothing and the weights stay.
`CPUWorkerExtension` (verl's worker extension, subclassed) makes vLLM keep the weight (`remove_weight=False`); verl's
sync loads into it and then re-runs process_weights_after_loading, which packs the new weights again.
`CPUvLLMReplica` / `CPUvLLMHttpServer` differ from verl's only in naming that extension.
"""

from __future__ import annotations

import ray
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

EXTENSION = "training.cpu_backend.vllm_rollout.CPUWorkerExtension"


def keep_linear_weights() -> None:
    """Makes vLLM's CPU linear layers keep their weight parameter after packing it (idempotent)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    if getattr(UnquantizedLinearMethod.process_weights_after_loading, "keeps_weights", False):
        return

    def process_weights_after_loading(self, layer) -> None:
        dispatch_cpu_unquantized_gemm(layer, remove_weight=False)

    process_weights_after_loading.keeps_weights = True
    UnquantizedLinearMethod.process_weights_after_loading = process_weights_after_loading


class CPUWorkerExtension(vLLMColocateWorkerExtension):
    """verl's vLLM worker extension, in a vLLM worker process that keeps linear weights reloadable."""

    def __new__(cls, **kwargs):
        keep_linear_weights()  # before the worker loads the model
        return super().__new__(cls, **kwargs)


class CPUvLLMHttpServer(vLLMHttpServer):
    """verl's vLLM server with the CPU worker extension."""

    def _get_worker_extension_cls(self) -> str:
        return EXTENSION


class CPUvLLMReplica(vLLMReplica):
    """verl's vLLM replica, starting CPUvLLMHttpServer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CPUvLLMHttpServer)
