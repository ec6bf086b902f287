"""The actor worker's link to its replica's TransformersServer (training/cpu_backend/rollout.py): the server's Ray
name, the wire format of the weights, and `TransformersRolloutAdapter`, which verl builds inside each actor worker
(`get_rollout_class`, training/cpu_backend/patches.py). It receives the actor's weights after every update through
verl's own "naive" weight-sync path and ships them to the server in buckets; it forwards sleep and wake-up."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import numpy as np
import ray
import torch
from verl.workers.rollout.base import BaseRollout

from training.cpu_backend import ROLLOUT_NAME

logger = logging.getLogger(__name__)


def server_actor_name(replica_rank: int) -> str:
    """Returns the Ray actor name of a replica's server (the adapter finds it by name)."""
    return f"{ROLLOUT_NAME}_server_{replica_rank}"


def to_wire(tensor: torch.Tensor) -> tuple[np.ndarray, str]:
    """Returns a numpy view Ray can ship without a copy (bf16/fp16 as raw 16-bit words) and the dtype name."""
    tensor = tensor.detach().to("cpu").contiguous()
    if tensor.dtype in (torch.bfloat16, torch.float16):
        return tensor.view(torch.int16).numpy(), str(tensor.dtype)
    return tensor.numpy(), str(tensor.dtype)


def from_wire(array: np.ndarray, dtype: str) -> torch.Tensor:
    tensor = torch.from_numpy(np.array(array, copy=True))
    if dtype in ("torch.bfloat16", "torch.float16"):
        return tensor.view(getattr(torch, dtype.split(".")[1]))
    return tensor


class TransformersRolloutAdapter(BaseRollout):
    """Built by verl inside each actor worker (`get_rollout_class`): the worker's link to its replica's server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1, **_: Any):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = self.config.tensor_model_parallel_size * self.config.data_parallel_size
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.has_server = rank % world == 0
        self.server = None
        self.bucket_bytes = int(self.config.checkpoint_engine.update_weights_bucket_megabytes) << 20

    def _server(self):
        if self.server is None:
            self.server = ray.get_actor(server_actor_name(self.replica_rank))
        return self.server

    async def resume(self, tags: list[str]):
        if self.has_server:
            await self._server().wake_up.remote(tags=tags)

    async def release(self):
        if self.has_server:
            await self._server().sleep.remote()

    @torch.no_grad()
    async def update_weights(self, weights, global_steps: int = None, wire_format: str = "named_tensors",
                             peft_config=None, **kwargs):
        """Ships the actor's full tensors to the server in buckets, then has it check and finish the update."""
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the transformers rollout takes full tensors, not {wire_format!r}")
        if peft_config is not None:
            raise NotImplementedError("LoRA adapters are synced merged on CPU: set actor_rollout_ref.model.lora.merge=true")
        start = time.perf_counter()
        bucket, size = {}, 0
        if self.has_server:
            await self._server().begin_weight_update.remote()
        for name, tensor in weights:  # every rank iterates: full tensors are gathered collectively
            if not self.has_server:
                continue
            bucket[name] = to_wire(tensor)
            size += tensor.numel() * tensor.element_size()
            if size >= self.bucket_bytes:
                await self._server().load_weights.remote(bucket)
                bucket, size = {}, 0
        if self.has_server:
            if bucket:
                await self._server().load_weights.remote(bucket)
            await self._server().finish_weight_update.remote(global_steps)
            logger.info("weights synced to %s in %.2f s", server_actor_name(self.replica_rank),
                        time.perf_counter() - start)
