"""Token sampling for the CPU rollout: a batched decode loop over a Hugging Face causal LM with a KV cache.

Written out (not `model.generate`) for two reasons: the log-probability of each sampled token must be the one
verl's actor computes (log-softmax of logits / temperature, before top-k/top-p truncation, as vLLM's
"processed_logprobs"), kept per step instead of storing full logits; and sampling follows vLLM's conventions
(temperature 0 = greedy, top_k -1 = off, stop after the first EOS, which is part of the response, unless ignore_eos).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass(frozen=True)
class SamplingSpec:
    """The sampling parameters a group of requests shares (vLLM's names and conventions)."""

    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: off
    repetition_penalty: float = 1.0
    ignore_eos: bool = False  # sample every row to its token limit; an EOS drawn on the way is kept, as in vLLM

    @classmethod
    def from_params(cls, params: dict) -> "SamplingSpec":
        """Returns the spec of a vLLM-style sampling_params dict (missing keys take vLLM's defaults)."""
        top_k = params.get("top_k")
        return cls(temperature=float(params.get("temperature", 1.0) if params.get("temperature") is not None else 1.0),
                   top_p=float(params.get("top_p") if params.get("top_p") is not None else 1.0),
                   top_k=int(top_k) if top_k is not None else -1,
                   repetition_penalty=float(params.get("repetition_penalty") or 1.0),
                   ignore_eos=bool(params.get("ignore_eos", False)))


@dataclass
class Sampled:
    """One sequence's response: token ids (EOS included when it stopped there) and their log-probs."""

    token_ids: list[int]
    log_probs: list[float]
    finished_by_eos: bool
    aborted: bool = False  # cut short by `stop` (a partial rollout, continued later under newer weights)


def _filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Returns logits with tokens outside top-k / the top-p nucleus set to -inf (rows independent)."""
    if top_k and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative - sorted_logits.softmax(dim=-1) >= top_p  # keeps the token that crosses top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """vLLM/HF repetition penalty over the tokens in `seen` (batch x tokens, -1 = none)."""
    index = seen.clamp(min=0)
    values = logits.gather(-1, index)
    values = torch.where(values > 0, values / penalty, values * penalty)
    penalised = logits.scatter(-1, index, values)
    return torch.where((seen >= 0).any(-1, keepdim=True), penalised, logits)


@torch.inference_mode()
def sample_batch(model, prompts: list[list[int]], max_new_tokens: list[int], spec: SamplingSpec,
                 eos_token_ids: set[int], pad_token_id: int, generator: torch.Generator | None = None,
                 seeds: list[int | None] | None = None, stop: threading.Event | None = None,
                 on_finished: Callable[[int, Sampled], None] | None = None) -> list[Sampled]:
    """Samples one response per prompt (left-padded batch, one KV cache); returns them in prompt order.

    Identical prompts (a GRPO group's n samples) are prefilled once and their KV cache rows repeated: prefill of
    ~300-token prompts dominates CPU generation. Each row stops at its first EOS token (never with
    `spec.ignore_eos`) or at its own `max_new_tokens`; the batch stops when every row has. A row with a seed
    (`seeds[i]`, vLLM's per-request `seed`) draws from its own generator, so its draws do not depend on the other
    rows; the others share `generator`.

    For partial rollout (verl's colocated async trainer): `on_finished(row, sampled)` is called as each row stops, so
    its request can be answered before the batch ends, and once `stop` is set the loop ends at the next token: the
    rows still running come back with what they have, `aborted`.
    """
    device = next(model.parameters()).device
    unique = list(dict.fromkeys(tuple(p) for p in prompts))
    rows = torch.tensor([unique.index(tuple(p)) for p in prompts], device=device) if len(unique) < len(prompts) \
        else None
    width = max(len(p) for p in unique)
    input_ids = torch.full((len(unique), width), pad_token_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(unique), width), dtype=torch.long, device=device)
    for row, ids in enumerate(unique):
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        mask[row, width - len(ids):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    limits = torch.tensor(max_new_tokens, device=device)
    stop_ids = set() if spec.ignore_eos else set(eos_token_ids)
    eos = torch.tensor(sorted(stop_ids), dtype=torch.long, device=device)
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache, logits = out.past_key_values, out.logits[:, -1, :].float()
    if rows is not None:  # one row per request from here on
        cache.reorder_cache(rows)
        input_ids, mask, positions, logits = input_ids[rows], mask[rows], positions[rows], logits[rows]
    row_generators = [torch.Generator(device=device).manual_seed(int(seed)) if seed is not None else None
                      for seed in seeds] if seeds and any(seed is not None for seed in seeds) else None
    tokens, log_probs = [], []
    done = torch.zeros(len(prompts), dtype=torch.bool, device=device)
    seen = input_ids.masked_fill(mask == 0, -1)
    for step in range(int(limits.max())):
        if spec.repetition_penalty != 1.0:
            logits = _apply_repetition_penalty(logits, seen, spec.repetition_penalty)
        greedy = spec.temperature <= 0
        scaled = logits if greedy else logits / spec.temperature
        step_log_probs = torch.log_softmax(scaled, dim=-1)
        if greedy:
            token = scaled.argmax(dim=-1)
        else:
            filtered = _filter_top_k_top_p(scaled, spec.top_k, spec.top_p)
            probs = filtered.softmax(dim=-1)
            if row_generators is None:
                token = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
            else:  # one draw per row, each from its own generator (or the shared one)
                token = torch.cat([torch.multinomial(probs[row], 1, generator=g if g is not None else generator)
                                   for row, g in enumerate(row_generators)])
        token = token.masked_fill(done, pad_token_id)
        tokens.append(token)
        log_probs.append(step_log_probs.gather(-1, token[:, None]).squeeze(-1))
        finished = done | torch.isin(token, eos) | (step + 1 >= limits)
        if on_finished is not None:
            for row in (finished & ~done).nonzero().flatten().tolist():
                ids = [int(t[row]) for t in tokens]
                on_finished(row, _cut(ids, [float(lp[row]) for lp in log_probs], int(limits[row]), stop_ids))
        done = finished
        if bool(done.all()):
            break
        if stop is not None and stop.is_set():
            break
        seen = torch.cat([seen, token[:, None]], dim=-1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        positions = positions[:, -1:] + 1
        out = model(input_ids=token[:, None], attention_mask=mask, position_ids=positions, past_key_values=cache,
                    use_cache=True)
        cache, logits = out.past_key_values, out.logits[:, -1, :].float()
    token_matrix, log_prob_matrix = torch.stack(tokens, dim=1).tolist(), torch.stack(log_probs, dim=1).tolist()
    sampled = [_cut(ids, lps, limit, stop_ids) for ids, lps, limit in zip(token_matrix, log_prob_matrix, max_new_tokens)]
    for row in (~done).nonzero().flatten().tolist():  # only when stopped early
        sampled[row].aborted = True
    return sampled


def _cut(ids: list[int], log_probs: list[float], limit: int, eos_token_ids: set[int]) -> Sampled:
    """Returns a row's response up to and including its first EOS, at most `limit` tokens."""
    for index, token in enumerate(ids[:limit]):
        if token in eos_token_ids:
            return Sampled(ids[: index + 1], log_probs[: index + 1], True)
    return Sampled(ids[:limit], log_probs[:limit], False)
