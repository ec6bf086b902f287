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
`CPUvLLMReplica` / `CPUvLLMHttpServer` differ from verl's only in naming that extension, and in an optional probe of
the weight sync (RG_GRPO_SYNC_PROBE, for tests and checks): before the first rollout on each new set of weights, the
server scores fixed token sequences through verl's own `generate` (prompt log-probs) and appends them, tagged with
the weights' global step, to a file that can be compared with the actor's log-probs of the same sequences.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any, Optional

import ray

from training.cpu_backend.vllm_cpu import install_finder
from utils.root_logging import import_keeping_root_logging

install_finder()  # verl's vLLM modules ask importlib.metadata for `vllm` when imported
import_keeping_root_logging()  # vLLM's server would set the root logger to ERROR
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension  # noqa: E402
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica  # noqa: E402

EXTENSION = "training.cpu_backend.vllm_rollout.CPUWorkerExtension"
SYNC_PROBE_ENV = "RG_GRPO_SYNC_PROBE"  # a folder with sequences.json ([[token ids], ...]); writes replica_<rank>.jsonl


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
    """verl's vLLM server with the CPU worker extension (and the optional sync probe)."""

    _probed: Any = "never"  # the global step whose weights were last probed
    _probe_lock: Optional[asyncio.Lock] = None

    def _get_worker_extension_cls(self) -> str:
        return EXTENSION

    async def generate(self, prompt_ids, sampling_params, request_id, *args, **kwargs):
        folder = os.environ.get(SYNC_PROBE_ENV)
        if folder and self._probed != self.global_steps:
            self._probe_lock = self._probe_lock or asyncio.Lock()
            async with self._probe_lock:
                if self._probed != self.global_steps:
                    await self._record_sync_probe(Path(folder))
        return await super().generate(prompt_ids, sampling_params, request_id, *args, **kwargs)

    async def _record_sync_probe(self, folder: Path) -> None:
        """Appends {"global_steps", "logprobs"} for the probe's sequences: each token's log-prob given its prefix."""
        steps, rows = self.global_steps, []
        for index, ids in enumerate(json.loads((folder / "sequences.json").read_text())):
            output = await super().generate(list(ids), {"max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0},
                                            request_id=f"sync-probe-{steps}-{index}")
            rows.append([values[0] for values in output.extra_fields["prompt_logprobs"][:-1]])  # last: verl's pad
        with open(folder / f"replica_{self.replica_rank}.jsonl", "a") as out:
            out.write(json.dumps({"global_steps": steps, "logprobs": rows}) + "\n")
        self._probed = steps


class CPUvLLMReplica(vLLMReplica):
    """verl's vLLM replica, starting CPUvLLMHttpServer."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CPUvLLMHttpServer)
