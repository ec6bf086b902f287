"""The CPU backend's training engine: verl's FSDP engine, with the model left unwrapped when there is one rank.

On a single CPU rank FSDP2 shards nothing, yet it still pays for sharding on every micro-batch: parameters are
DTensors, each forward and backward unshards them through hooks, each backward reduce-scatters the gradients (over a
gloo group of one), and PyTorch's AdamW falls back to a Python loop over DTensors (BENCHMARKS.md, issue 49: about
3 s of a 23-s SmolLM2 update). With world size 1 this engine keeps the Hugging Face module as it is; verl's own FSDP
engine already handles an unwrapped module (`fsdp_version(module) == 0`) in every path a run takes: gradient
clipping, the weight sync, checkpoints (a rank's file holds plain tensors; utils/fsdp_checkpoint.py reads them) and
offload. With two or more ranks it is verl's FSDP2 engine unchanged.

Mixed precision keeps its meaning: verl's forward runs under autocast to `fsdp_config.mixed_precision.param_dtype`
unless that is fp32 (the CPU default), and the weights stay in the dtype they were loaded in.
"""

from __future__ import annotations

import torch
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead


def keeps_plain_module(world_size: int, lora: bool) -> bool:
    """Whether the engine skips FSDP: one rank, and no LoRA (verl merges LoRA adapters for the sync through FSDP)."""
    return world_size == 1 and not lora


class _SingleRankMixin:
    """Replaces verl's `_build_fsdp_module` with an identity on one rank (see the module docstring)."""

    def _build_fsdp_module(self, module):
        if not keeps_plain_module(torch.distributed.get_world_size(), self._is_lora):
            return super()._build_fsdp_module(module)
        from verl.utils.torch_dtypes import PrecisionType

        mixed_precision = self.engine_config.mixed_precision or {}
        param_dtype = PrecisionType.to_dtype(mixed_precision.get("param_dtype", "fp32"))
        if param_dtype == torch.float16:
            raise ValueError("fsdp_config.mixed_precision.param_dtype=fp16 needs loss scaling, which the single-rank "
                             "CPU engine does not do: use fp32 or bf16")
        self._autocast_dtype = param_dtype  # verl's forward_step skips autocast for fp32
        self.scaler = None
        return module


class SingleRankEngineWithLMHead(_SingleRankMixin, FSDPEngineWithLMHead):
    """verl's language-model engine (actor, reference) for the CPU backend."""


class SingleRankEngineWithValueHead(_SingleRankMixin, FSDPEngineWithValueHead):
    """verl's value-model engine (critic) for the CPU backend."""
