"""transformers' sdpa attention with grouped-query heads read in place: the same bits on a CPU, less copying.

Used by the CPU rollout's sampler (training/cpu_backend/rollout.py) and the evaluator's HF backend on a CPU
(evaluation/backends/hf.py): both decode left-padded batches with a KV cache, where transformers' sdpa copies every
layer's key and value heads once per query group on each step.
"""

from __future__ import annotations

import torch


GQA_SDPA = "rg_sdpa_gqa"  # transformers attention name: its sdpa, without copying the key/value heads


def sdpa_gqa_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                       attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                       is_causal: bool | None = None, **_) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, with grouped-query heads read in place (`enable_gqa`) instead of copied.

    With a padding mask, transformers' sdpa copies each layer's key and value cache once per query head group
    (`repeat_kv`) on every decode step: ~1 s of a SmolLM2 rollout on 2 cores (torch profiler), growing with the
    sequence. PyTorch's CPU kernel gives the same bits either way (tests/training/cpu_backend/test_sampling.py);
    causality and the mask are transformers' own."""
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = query.shape[2] > 1 and attention_mask is None and is_causal
    output = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
        enable_gqa=key.shape[1] != query.shape[1])
    return output.transpose(1, 2).contiguous(), None


def use_gqa_sdpa(model) -> bool:
    """Switches a model that attends with transformers' "sdpa" to `sdpa_gqa_attention` (same masks); returns whether
    it did. For decoding on a CPU only: the actor's backward keeps transformers' own path, and CUDA's sdpa kernels
    with a mask may not take `enable_gqa`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    if model.config._attn_implementation != "sdpa":
        return False
    AttentionInterface.register(GQA_SDPA, sdpa_gqa_attention)
    AttentionMaskInterface.register(GQA_SDPA, sdpa_mask)
    model.set_attn_implementation(GQA_SDPA)
    return model.config._attn_implementation == GQA_SDPA
