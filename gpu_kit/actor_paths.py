"""The paths gpu_kit/actor_bench.py times, as functions of torch and transformers: PyTorch's varlen attention
registered through transformers' AttentionInterface, the log-prob paths (verl's row loops against vectorised and
chunked ones), model flops against a card's peak, and which path cannot run where. Nothing of the project."""

from __future__ import annotations

import inspect

VARLEN = "rg_varlen"  # the attention name registered for PyTorch's varlen kernel
CHUNK_TOKENS = 4096
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "GH200": 989.0, "B200": 2250.0, "A100": 312.0,
                    "L40S": 362.0}  # dense bf16 tensor-core peaks (SXM where a card has variants)
LOGPROB_PATHS = ["rowloop_bf16", "rowloop_fp32", "vectorised_fp32", "chunked_fp32"]


def cu_seqlens_from_positions(position_ids, torch):
    """Sequence bounds of a packed row from its position ids (each sequence counts from 0): (cu_seqlens int32,
    longest). The layout verl feeds the model when `use_remove_padding=true`."""
    positions = position_ids.reshape(-1)
    starts = torch.nonzero(positions == 0).reshape(-1)
    bounds = torch.cat([starts, torch.tensor([positions.numel()], device=positions.device)]).to(torch.int32)
    return bounds, int((bounds[1:] - bounds[:-1]).max())


# ----- the varlen attention, registered through transformers' AttentionInterface


def varlen_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs):
    """Causal attention of a packed row (batch 1), each sequence to itself: PyTorch's `varlen_attn` on CUDA, a
    per-sequence sdpa loop elsewhere (the same bounds: what the dry run checks). query (1, H, T, D), key and value
    (1, H_kv, T, D); returns (1, T, H, D) as transformers' attention functions do."""
    import torch

    if query.shape[0] != 1 or attention_mask is not None:
        raise ValueError(f"{VARLEN}: a packed row (batch 1, no mask) is needed, got batch {query.shape[0]}"
                         f"{' and a mask' if attention_mask is not None else ''}")
    bounds, longest = cu_seqlens_from_positions(kwargs["position_ids"], torch)
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, heads, D)
    if query.is_cuda:
        from torch.nn.attention.varlen import varlen_attn

        parameters = inspect.signature(varlen_attn).parameters
        extra = {"scale": scaling} if "scale" in parameters else {}
        if "window_size" in parameters:  # torch >= 2.12: causal is a window of (-1, 0)
            extra["window_size"] = (-1, 0)
        else:
            extra["is_causal"] = True
        if k.shape[1] != q.shape[1]:
            if "enable_gqa" in parameters:
                extra["enable_gqa"] = True
            else:
                k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        out = varlen_attn(q, k, v, bounds, bounds, longest, longest, **extra)
    else:
        pieces = []
        for start, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            pieces.append(torch.nn.functional.scaled_dot_product_attention(
                q[start:end].transpose(0, 1), k[start:end].transpose(0, 1), v[start:end].transpose(0, 1),
                is_causal=True, scale=scaling, enable_gqa=k.shape[1] != q.shape[1]).transpose(0, 1))
        out = torch.cat(pieces)
    return out.unsqueeze(0), None


def register_varlen() -> None:
    """Registers `varlen_attention` as VARLEN; no mask function: transformers then builds no mask for it."""
    from transformers import AttentionInterface

    AttentionInterface.register(VARLEN, varlen_attention)


def logprobs(hidden, weight, labels, path: str, torch):
    """Log-probs of `labels` (T,) from hidden states (T, d) through lm_head `weight` (V, d), by `path`."""
    if path == "chunked_fp32":
        pieces = []
        for start in range(0, hidden.shape[0], CHUNK_TOKENS):
            logits = (hidden[start:start + CHUNK_TOKENS] @ weight.T).float()
            chosen = logits.gather(-1, labels[start:start + CHUNK_TOKENS, None]).squeeze(-1)
            pieces.append(chosen - torch.logsumexp(logits, dim=-1))
        return torch.cat(pieces)
    logits = hidden @ weight.T
    if path == "vectorised_fp32":
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, labels[:, None]).squeeze(-1)
    if path == "rowloop_fp32":  # verl's logprobs_from_logits_v2, fp32 branch, on a packed row's (T, V) logits
        logits = logits.float()
        chosen = logits.gather(-1, labels[:, None]).squeeze(-1)
        return chosen - torch.stack([torch.logsumexp(row, dim=-1) for row in logits])
    if path == "rowloop_bf16":  # its bf16 branch: a log_softmax per row
        return torch.stack([torch.log_softmax(row, dim=-1)[label] for row, label in zip(logits, labels)])
    raise ValueError(f"unknown log-prob path {path!r}; known: {LOGPROB_PATHS}")


def model_flops(model, tokens: int, squares: int) -> float:
    """Model flops of a forward and backward: 6 x matmul params x tokens, plus causal attention's 6 x layers x
    heads x head_dim x sum of squared sequence lengths (`squares`)."""
    import torch

    config = model.config
    matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 6.0 * matmul * tokens + 6.0 * config.num_hidden_layers * config.num_attention_heads * head_dim * squares


def peak_tflops(device_name: str) -> float | None:
    for key, value in sorted(PEAK_BF16_TFLOPS.items(), key=lambda kv: -len(kv[0])):
        if key in device_name:
            return value
    return None


def unavailable(path: str, device: str) -> str | None:
    """Why a path cannot run here (None: it can)."""
    import importlib.metadata

    # both ship the module flash_attn: the distribution tells them apart (as transformers does)
    distributions = importlib.metadata.packages_distributions().get("flash_attn", [])
    if path == "flash_attention_2" and "flash_attn" not in [d.replace("-", "_") for d in distributions]:
        return "flash-attn (2) is not installed"
    if path == "flash_attention_4" and "flash-attn-4" not in [d.replace("_", "-") for d in distributions]:
        return "flash-attn-4 is not installed"
    if (path.startswith("flash_attention") or path == "flex_packed") and device != "cuda":
        return "needs CUDA (FlexAttention has no backward on a CPU)" if path == "flex_packed" else "needs CUDA"
    if path == "varlen_packed":
        try:
            import torch.nn.attention.varlen  # noqa: F401
        except ImportError:
            return "this torch has no torch.nn.attention.varlen"
    return None


def agreement(reference: dict, other: dict, torch) -> dict:
    """Largest relative difference of hidden states and largest absolute difference of log-probs, per sequence."""
    hidden, logp = 0.0, 0.0
    for i, (h0, lp0) in reference.items():
        h1, lp1 = other[i]
        hidden = max(hidden, float((h1 - h0).norm() / h0.norm().clamp(min=1e-12)))
        logp = max(logp, float((lp1 - lp0).abs().max()))
    return {"hidden_max_rel": round(hidden, 6), "logprob_max_abs": round(logp, 6)}
