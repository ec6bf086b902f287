"""A rollout for verl that generates with transformers on CPU, served the way verl's agent loop expects.

Three parts, one per verl role (the same split vLLM has in verl):
- `TransformersServer`: a Ray actor per replica serving verl's token-in/token-out `generate`; the agent loop's
  concurrent requests are gathered into batches and sampled in one decode loop (training.cpu_backend.sampling).
  A batch's numbers depend on its rows (padding width, matrix shapes), so for runs that repeat exactly the trainer
  announces each submission's request count (`expect`, training/trainer/seeding.py): the server then waits for all
  of them and samples them sorted by prompt and seed, whatever order and timing they arrived in.
  Each request is answered as its row stops, not when its batch ends. For verl's colocated async trainer the server
  also pauses: `abort_all_requests` stops the running batch at its next token and answers the unfinished rows with
  what they have ("aborted": verl's FullyAsyncLLMServerClient sends them again, prompt + partial response, once
  `resume_generation` opens the gate); requests that arrive or wait meanwhile are parked until then.
- `TransformersReplica` (verl's `RolloutReplicaRegistry`, name "transformers"): starts the servers.
- `TransformersRolloutAdapter` (built inside each actor worker; training/cpu_backend/rollout_adapter.py): receives
  the actor's weights after every update through verl's own "naive" weight-sync path and ships them to its
  replica's server; forwards sleep / wake-up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import ray
import torch
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, TokenOutput

from training.cpu_backend import ROLLOUT_NAME
from training.cpu_backend.decode_progress import DecodeProgress
from training.cpu_backend.rollout_adapter import from_wire, server_actor_name
from training.cpu_backend.sampling import SamplingSpec, sample_batch
from utils.gqa_sdpa import use_gqa_sdpa

PROGRESS_ENV = "RG_GRPO_ROLLOUT_PROGRESS"  # seconds between progress updates of a batch's decoding; 0: no progress
logger = logging.getLogger(__name__)
STALL_SECONDS = 5.0  # an announced submission whose requests stop arriving this long is sampled as it is


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    spec: SamplingSpec
    seed: Optional[int]
    future: asyncio.Future = field(repr=False)
    arrived: float = field(default_factory=time.perf_counter)

    def order(self) -> tuple:
        """The place of the request in a batch: by prompt (a group's samples share one prefill), then seed."""
        return (self.prompt_ids, -1 if self.seed is None else self.seed, self.max_tokens)


class TransformersServer:
    """One replica's generation server (a Ray actor): verl's `generate` plus the control calls verl makes.

    Weights: loaded from the model folder at start; replaced by `load_weights` + `finish_weight_update` after each
    actor update. `sleep` releases the parameter memory (free_cache_engine); `wake_up(["weights"])` reallocates
    it for the next sync, and `generate` waits until the replica is awake with complete weights.
    """

    def __init__(self, config, model_config, replica_rank: int, rollout_mode: RolloutMode, threads: int = 0,
                 gather_seconds: float = 0.05, progress_seconds: float = 0.0):
        from transformers import AutoModelForCausalLM
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        config = omega_conf_to_dataclass(config)
        model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.config, self.model_config, self.replica_rank = config, model_config, replica_rank
        self.rollout_mode = rollout_mode
        if threads:
            torch.set_num_threads(int(threads))
        path = model_config.local_path or model_config.path
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")
        self.model.eval()
        use_gqa_sdpa(self.model)  # the same bits as transformers' sdpa, without copying the key/value heads
        self.shapes = {name: (p.shape, p.dtype) for name, p in self.model.named_parameters()}
        self.loaded: set[str] = set(self.shapes)
        self.complete = True  # False from a sleep or the start of a sync until a sync finishes
        tokenizer = model_config.tokenizer
        generation = self.model.generation_config
        eos = generation.eos_token_id if generation.eos_token_id is not None else tokenizer.eos_token_id
        self.eos_token_ids = set(eos if isinstance(eos, list) else [eos])
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        self.pad_token_id = int(pad)
        self.generator = torch.Generator().manual_seed(int(config.seed or 0) + replica_rank)
        self.global_steps: Optional[int] = None
        self.gather_seconds = gather_seconds
        self.pending: list[_Request] = []
        self.expected = 0  # requests announced (`expect`) and not yet taken into a batch
        self.batcher: Optional[asyncio.Task] = None
        self.awake: Optional[asyncio.Event] = None
        self.open: Optional[asyncio.Event] = None  # cleared by abort_all_requests until resume_generation
        self.stop = threading.Event()  # set while an abort ends the running batch
        self.sampling: Optional[asyncio.Future] = None  # the running batch's thread, while it runs
        # seconds: sampling; gather_seconds: a batch's first request's arrival -> its sampling starts
        self.stats = {"batches": 0, "sequences": 0, "tokens": 0, "seconds": 0.0, "gather_seconds": 0.0,
                      "aborted": 0}
        self.progress = DecodeProgress(self.model, progress_seconds, f"rollout {replica_rank}",
                                       self.eos_token_ids | {self.pad_token_id})

    def _awake_event(self) -> asyncio.Event:
        if self.awake is None:  # created inside the actor's event loop
            self.awake = asyncio.Event()
            self.awake.set()
        return self.awake

    def _open_event(self) -> asyncio.Event:
        if self.open is None:
            self.open = asyncio.Event()
            self.open.set()
        return self.open

    async def _ready(self) -> None:
        """Waits until the replica is awake and not paused (both, at the same moment)."""
        while not (self._awake_event().is_set() and self._open_event().is_set()):
            await self._awake_event().wait()
            await self._open_event().wait()

    # ---- generation ----
    async def generate(self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str,
                       image_data: Any = None, video_data: Any = None, **_: Any) -> TokenOutput:
        """verl's token-in/token-out call: samples one response for `prompt_ids` (batched with its neighbours)."""
        if image_data is not None or video_data is not None:
            raise NotImplementedError("the transformers CPU rollout serves text-only models")
        params = dict(sampling_params)
        params.setdefault("ignore_eos", bool(self.config.get("ignore_eos", False)))  # as verl's vLLM server does
        prompt_ids = [int(t) for t in prompt_ids]
        room = int(self.config.max_model_len or (self.config.prompt_length + self.config.response_length)) - len(prompt_ids)
        if room < 1:
            raise ValueError(f"prompt of {len(prompt_ids)} tokens leaves no room to generate "
                             f"(rollout.max_model_len={self.config.max_model_len})")
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", None))
        if max_tokens is None:
            max_tokens = min(self.config.response_length,
                             self.config.prompt_length + self.config.response_length - len(prompt_ids))
        max_tokens = max(1, min(int(max_tokens), room))
        seed = params.get("seed")
        future = asyncio.get_running_loop().create_future()
        self.pending.append(_Request(prompt_ids, max_tokens, SamplingSpec.from_params(params),
                                     None if seed is None else int(seed), future))
        if self.batcher is None or self.batcher.done():
            self.batcher = asyncio.create_task(self._drain())
        return await future

    async def expect(self, count: int) -> None:
        """The trainer announces a submission of `count` requests: they are sampled together once all have arrived."""
        self.expected += int(count)

    async def _gather(self) -> None:
        """Waits for the announced requests (all of them, or until they stop arriving for STALL_SECONDS); without an
        announcement, until none arrive for `gather_seconds` or a batch is full."""
        seen, quiet = -1, 0.0
        while len(self.pending) < self.expected:
            quiet = 0.0 if len(self.pending) != seen else quiet + self.gather_seconds
            if quiet >= STALL_SECONDS:
                logger.warning("rollout replica %d: %d of %d announced requests arrived; sampling them without the "
                               "rest (this batch is not reproducible)", self.replica_rank, len(self.pending),
                               self.expected)
                break
            seen = len(self.pending)
            await asyncio.sleep(self.gather_seconds)
        if self.expected:
            return
        while seen != len(self.pending) and len(self.pending) < int(self.config.max_num_seqs):
            seen = len(self.pending)
            await asyncio.sleep(self.gather_seconds)

    async def _drain(self) -> None:
        """Gathers requests (`_gather`), then samples them sorted, group by group, max_num_seqs at a time."""
        size = int(self.config.max_num_seqs)
        while self.pending:
            await self._gather()
            await self._ready()
            if self.expected:  # everything announced has arrived (or stalled): one batch
                batch, self.pending, self.expected = self.pending, [], 0
            else:
                batch, self.pending = self.pending[:size], self.pending[size:]
            self.stats["gather_seconds"] += time.perf_counter() - min(request.arrived for request in batch)
            groups: dict[SamplingSpec, list[_Request]] = {}
            for request in sorted(batch, key=_Request.order):
                groups.setdefault(request.spec, []).append(request)
            chunks = [(spec, requests[start:start + size])
                      for spec, requests in groups.items() for start in range(0, len(requests), size)]
            for index, (spec, requests) in enumerate(chunks):
                if not self._open_event().is_set():  # paused: the chunks not started wait for resume_generation
                    self.pending[:0] = [request for _, later in chunks[index:] for request in later]
                    break
                self.sampling = asyncio.ensure_future(asyncio.to_thread(self._sample, spec, requests,
                                                                          asyncio.get_running_loop()))
                try:
                    outputs = await self.sampling
                except Exception as err:  # every waiting request learns why
                    for request in requests:
                        if not request.future.done():
                            request.future.set_exception(err)
                    continue
                finally:
                    self.sampling = None
                for request, output in zip(requests, outputs):
                    if not request.future.done():
                        request.future.set_result(output)

    def _sample(self, spec: SamplingSpec, requests: list[_Request],
                loop: Optional[asyncio.AbstractEventLoop] = None) -> list[TokenOutput]:
        """Samples one chunk (in a thread); each request is answered on `loop` as its row stops."""
        if not self.complete:
            raise RuntimeError(f"rollout replica {self.replica_rank} was asked to generate without complete weights "
                               "(released by sleep, or a weight sync that did not finish)")
        start = time.perf_counter()
        sampled = []

        def answered(row: int, done) -> None:  # from this thread: the future belongs to the actor's event loop
            if loop is not None:
                loop.call_soon_threadsafe(self._answer, requests[row].future, self._output(done))

        self.progress.start(len(requests), max(r.max_tokens for r in requests))
        try:
            sampled = sample_batch(self.model, [r.prompt_ids for r in requests], [r.max_tokens for r in requests],
                                   spec, self.eos_token_ids, self.pad_token_id, self.generator,
                                   seeds=[r.seed for r in requests], stop=self.stop, on_finished=answered)
        finally:
            self.progress.finish(sampled)
        self.stats["batches"] += 1
        self.stats["sequences"] += len(requests)
        self.stats["tokens"] += sum(len(s.token_ids) for s in sampled)
        self.stats["aborted"] += sum(s.aborted for s in sampled)
        self.stats["seconds"] += time.perf_counter() - start
        return [self._output(s) for s in sampled]

    def _output(self, sampled) -> TokenOutput:
        return TokenOutput(token_ids=sampled.token_ids, log_probs=sampled.log_probs,
                           stop_reason="aborted" if sampled.aborted else "completed",
                           extra_fields={"global_steps": self.global_steps})

    @staticmethod
    def _answer(future: asyncio.Future, output: TokenOutput) -> None:
        if not future.done():
            future.set_result(output)

    # ---- weights ----
    def load_weights(self, bucket: dict[str, tuple[np.ndarray, str]]) -> int:
        """Copies a bucket of the actor's tensors (HF names) into the model; returns how many were taken."""
        params = dict(self.model.named_parameters())
        taken = 0
        with torch.no_grad():
            for name, (array, dtype) in bucket.items():
                param = params.get(name)
                if param is None:
                    continue  # e.g. lm_head.weight of a tied model arrives under the embedding's name only
                tensor = from_wire(array, dtype)
                if param.numel() == 0:
                    param.data = torch.empty(self.shapes[name][0], dtype=self.shapes[name][1])
                param.data.copy_(tensor.to(param.dtype).view(self.shapes[name][0]))
                self.loaded.add(name)
                taken += 1
        return taken

    def finish_weight_update(self, global_steps: Optional[int] = None) -> dict[str, int]:
        """Ties shared weights, checks every parameter arrived, records the step; returns counts."""
        if getattr(self.model.config, "tie_word_embeddings", False):
            self.model.tie_weights()  # named_parameters() lists a tied weight once, so `shapes` needs it once
        missing = sorted(set(self.shapes) - self.loaded)
        if missing:
            raise RuntimeError(f"weight sync to rollout replica {self.replica_rank} missed {len(missing)} tensors, "
                               f"e.g. {missing[:3]}")
        self.global_steps = global_steps
        self.complete = True
        return {"tensors": len(self.loaded)}

    def begin_weight_update(self) -> None:
        self.loaded, self.complete = set(), False

    # ---- control calls verl makes on every server ----
    async def wake_up(self, tags: Optional[list[str]] = None) -> None:
        tags = tags or ["weights", "kv_cache"]
        if "weights" in tags:
            with torch.no_grad():
                for name, param in self.model.named_parameters():
                    if param.numel() == 0:
                        param.data = torch.empty(self.shapes[name][0], dtype=self.shapes[name][1])
        if "kv_cache" in tags or self.rollout_mode != RolloutMode.HYBRID:
            self._awake_event().set()

    async def sleep(self) -> None:
        """Releases the parameter memory until the next weight sync (hybrid mode, free_cache_engine)."""
        if not self.config.free_cache_engine or self.rollout_mode != RolloutMode.HYBRID:
            return
        self._awake_event().clear()
        with torch.no_grad():
            for param in self.model.parameters():
                param.data = torch.empty(0, dtype=param.dtype)
        self.loaded, self.complete = set(), False

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def get_stats(self) -> dict[str, float]:
        return dict(self.stats)

    async def clear_kv_cache(self) -> None:
        return None  # caches live only inside one batch

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self.pending or (self.batcher is not None and not self.batcher.done()):
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Pauses generation: the running batch stops at its next token and answers its unfinished rows "aborted";
        waiting requests stay parked (with `reject_request`, they fail) until `resume_generation`."""
        self._open_event().clear()
        before = self.stats["aborted"]
        if self.sampling is not None:
            self.stop.set()
            try:
                await asyncio.shield(self.sampling)
            except Exception:
                pass  # its requests were told why (_drain)
            finally:
                self.stop.clear()
        if reject_request:
            for request in self.pending:
                if not request.future.done():
                    request.future.set_exception(RuntimeError(f"rollout replica {self.replica_rank} is paused"))
            self.pending, self.expected = [], 0
        return {"aborted_count": int(self.stats["aborted"] - before), "request_ids": []}

    async def resume_generation(self) -> None:
        self._open_event().set()

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        return {"aborted": False, "request_id": request_id}

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class TransformersReplica(RolloutReplica):
    """verl's rollout replica for the CPU backend: one TransformersServer actor per replica, on its worker's node."""

    async def launch_servers(self) -> None:
        node_id = None
        if self.workers:
            node_id = await self.workers[0].__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id())
        options: dict[str, Any] = {"name": server_actor_name(self.replica_rank), "num_cpus": 0,
                                   "max_concurrency": self.max_concurrency}
        if node_id is not None:
            options["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                node_id=node_id, soft=False)
        server = ray.remote(TransformersServer).options(**options).remote(
            config=self.config, model_config=self.model_config, replica_rank=self.replica_rank,
            rollout_mode=self.rollout_mode, threads=int(os.environ.get("RG_GRPO_ROLLOUT_THREADS", "0")),
            progress_seconds=float(os.environ.get(PROGRESS_ENV, "2")))
        await server.get_stats.remote()  # surfaces a failed model load here, not at the first request
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{ROLLOUT_NAME}://replica-{self.replica_rank}"

    def rollout_worker_use_gpu(self) -> bool:
        return False


