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

The language-model engine also asks the model for logits from the first scored position on (`ScoredColumnsMixin`):
verl computes logits, log-softmax and entropy over every prompt token and then drops them, and on a CPU the LM head
is a fifth of a small model's per-token compute (BENCHMARKS.md, issue 49). Its update leaves out the sequences whose
advantage is 0 where that is exact (training/zero_advantage/rules.py).
"""

from __future__ import annotations

import torch
from verl.utils import tensordict_utils as tu
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

from training.zero_advantage.engine import ZeroAdvantageSkipMixin


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


# micro-batch flags under which verl's outputs need logits at every position (or no logits at all)
_NEEDS_EVERY_POSITION = ("use_remove_padding", "use_fused_kernels", "calculate_sum_pi_squared",
                         "distillation_use_topk", "distillation_only")


def scored_columns_start(micro_batch) -> int:
    """The first padded column whose logits any policy output reads; 0 where every column is needed.

    A response token at column c is scored from the logits at c - 1, so every row needs its columns from
    `prompt length - 1` on; rows share one slice of the padded batch, so the shortest prompt sets it. Only a
    micro-batch that names its prompts (the actor's and the reference's, not SFT's whole-sequence loss) and runs
    verl's padded path with plain logits qualifies.
    """
    if any(tu.get_non_tensor_data(data=micro_batch, key=key, default=key == "use_remove_padding")
           for key in _NEEDS_EVERY_POSITION):
        return 0
    if "prompts" not in micro_batch.keys() or not micro_batch["prompts"].is_nested:
        return 0
    return max(int(micro_batch["prompts"].offsets().diff().min()) - 1, 0)


class _ScoredColumnsLinear(torch.autograd.Function):
    """An LM head run on the scored columns only, whose weight gradient is still summed over every row.

    Forward: logits for `hidden[:, start:]`. Backward: the hidden states' gradient for those columns (zero before
    them, as it was), and the weight's gradient as autograd computes it for the whole-width head, from a gradient
    that is zero on the columns before `start`, which is what they held before. So the run keeps every bit; a head
    sliced by `logits_to_keep` would sum the weight gradient over fewer rows, another rounding.
    """

    @staticmethod
    def forward(ctx, hidden, weight, start):
        ctx.save_for_backward(hidden, weight)
        ctx.start = start
        return torch.nn.functional.linear(hidden[:, start:], weight)

    @staticmethod
    def backward(ctx, grad_scored):
        hidden, weight = ctx.saved_tensors
        grad_hidden = grad_scored.new_zeros(hidden.shape)
        grad_hidden[:, ctx.start:] = grad_scored.matmul(weight)
        grad_logits = grad_scored.new_zeros((*hidden.shape[:-1], weight.shape[0]))
        grad_logits[:, ctx.start:] = grad_scored
        grad_weight = grad_logits.reshape(-1, weight.shape[0]).t().mm(hidden.reshape(-1, hidden.shape[-1]))
        return grad_hidden, grad_weight, None


class ScoredColumnsHead:
    """Makes a plain model's LM head compute the scored columns only, for the one forward the engine asks it to.

    The engine sets `start` before each forward (0: the head runs as it always does); the head takes and clears
    it. The module's parameters and state dict are untouched: only the head instance's `forward` is replaced.
    """

    def __init__(self, head: torch.nn.Linear):
        self.start = 0
        plain_forward = head.forward

        def forward(hidden):
            start, self.start = self.start, 0
            if not start:
                return plain_forward(hidden)
            return _ScoredColumnsLinear.apply(hidden, head.weight, start)

        head.forward = forward

    @classmethod
    def install(cls, module) -> ScoredColumnsHead | None:
        """The head's controller, or None where the head is not a bias-free linear layer (left as it is)."""
        head = module.get_output_embeddings() if hasattr(module, "get_output_embeddings") else None
        if type(head) is not torch.nn.Linear or head.bias is not None:
            return None
        return cls(head)


class ScoredColumnsMixin:
    """Logits, log-probs and entropy from the first scored column on, instead of at every position.

    On the plain single-rank module in fp32 only (the CPU default; bf16 autocast and FSDP keep verl's path): the
    LM head computes the scored columns (`ScoredColumnsHead`), verl's own `prepare_model_outputs` turns those
    logits into log-probs and entropy on the kept part of each sequence, and the result is scattered back into
    verl's whole-sequence layout, zero at the prompt positions, which verl's losses slice away
    (`no_padding_2_padding`). Every value a loss reads is the same computation on the same row,
    and the head's weight gradient is summed as before, so a run keeps its bits (tests/training/cpu_backend).
    """

    def _build_fsdp_module(self, module):
        from verl.utils.fsdp_utils import fsdp_version

        module = super()._build_fsdp_module(module)
        plain_fp32 = fsdp_version(module) == 0 and getattr(self, "_autocast_dtype", None) == torch.float32
        self._scored_head = ScoredColumnsHead.install(module) if plain_fp32 else None
        return module

    def prepare_model_inputs(self, micro_batch):
        model_inputs, output_args = super().prepare_model_inputs(micro_batch)
        head = getattr(self, "_scored_head", None)
        if head is not None:
            head.start = scored_columns_start(micro_batch)
            output_args["scored_columns_start"] = head.start
        return model_inputs, output_args

    def prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func):
        start = output_args.get("scored_columns_start", 0)
        if not start:
            return super().prepare_model_outputs(output, output_args, micro_batch, logits_processor_func)
        offsets = micro_batch["input_ids"].offsets()
        # where each row's kept tokens sit in verl's whole-sequence layout, and the kept rows' own offsets
        index = torch.cat([torch.arange(begin + start, end) for begin, end in zip(offsets[:-1].tolist(),
                                                                                  offsets[1:].tolist())])
        kept_offsets = torch.nn.functional.pad((offsets.diff() - start).cumsum(0), (1, 0))
        kept_ids = micro_batch["input_ids"].values()[index]
        kept_batch = micro_batch.copy()
        kept_batch["input_ids"] = torch.nested.nested_tensor_from_jagged(kept_ids, kept_offsets)
        kept_args = dict(output_args, input_ids_rmpad_rolled=torch.roll(kept_ids, shifts=-1, dims=0))
        kept_output = super().prepare_model_outputs(output, kept_args, kept_batch, logits_processor_func)
        for key, value in kept_output.items():
            values = value.values()
            whole = values.new_zeros((int(offsets[-1]), *values.shape[1:])).index_copy(0, index, values)
            kept_output[key] = torch.nested.nested_tensor_from_jagged(whole, offsets)
        return kept_output


class SingleRankEngineWithLMHead(ZeroAdvantageSkipMixin, ScoredColumnsMixin, _SingleRankMixin, FSDPEngineWithLMHead):
    """verl's language-model engine (actor, reference) for the CPU backend, with the zero-advantage skip
    (training/zero_advantage/rules.py)."""


class SingleRankEngineWithValueHead(_SingleRankMixin, FSDPEngineWithValueHead):
    """verl's value-model engine (critic) for the CPU backend."""
