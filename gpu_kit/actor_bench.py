"""The actor's forward and backward at the shapes people train, one attention or log-prob path against another, in
one process on one machine: no Ray, no vLLM, no verl, seconds a path (issue 46).

    python3 -m gpu_kit.actor_bench --out DIR                 # on the GPU: the image's Python is enough
    python3 -m gpu_kit.actor_bench --out DIR --dry-run       # on a CPU: every path at toy sizes, checked to agree

A training launch costs minutes; this measures what decides a GPU step's update in seconds. Per model (the published
configs in gpu_kit/models/, random weights, bf16), a batch as a GRPO step trains it: prompts x samples sequences of
a prompt (lengths drawn between half and all of its limit) and a response run to its limit, as with `ignore_eos`.
- Attention paths (one step = forward and backward of every sequence, in micro-batches, grads accumulated):
  `sdpa_padded` (micro-batches of the preset's size padded to their longest: what a CUDA run without flash-attn
  trains today, training/launch/hardware.py::choose_attention), `sdpa_packed` (one row of packed sequences:
  transformers finds them from the position ids and attends through one dense (T, T) mask), `flex_packed`
  (transformers' flex attention, its block mask from the same position ids), `varlen_packed` (PyTorch's
  `varlen_attn`, registered through transformers' AttentionInterface, sequence bounds from the position ids: nothing
  to install), and `flash_attention_2` / `flash_attention_4` packed where the package imports. On a CPU,
  `varlen_packed` runs the same bounds through a per-sequence sdpa loop, so the dry run checks the packing itself.
  Every path computes log-probs the same way (chunked, fp32) so that only attention differs.
- Log-prob paths on LOGPROB_TOKENS of a packed micro-batch's hidden states (lm_head, log-probs, backward): `rowloop_bf16` (what
  verl's `logprobs_from_logits_v2` does with bf16 logits of a packed row: a Python loop over tokens),
  `rowloop_fp32` (its fp32 branch: a loop of logsumexp), `vectorised_fp32` and `chunked_fp32` (4096 tokens a chunk).
Per path: seconds a step (after a warm-up), tokens/s (real tokens), MFU (model flops: 6 x matmul params x tokens
plus causal attention, against the GPU's dense bf16 peak), peak GPU memory, and agreement with `sdpa_padded`
(hidden states' largest relative difference, log-probs' largest absolute one). The record is rewritten after every
path (OUT/actor_bench.json), so a stage cut off keeps what it measured, and a new command skips the models measured
whole; OUT/actor_bench.md is the table. A path whose warm-up step takes over WARMUP_CAP_S is recorded as slow.
Imports torch and transformers only (gpu_kit's rule: nothing of the project).
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import random
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

MODELS_DIR = Path(__file__).resolve().parent / "models"
VARLEN = "rg_varlen"  # the attention name registered for PyTorch's varlen kernel
CHUNK_TOKENS = 4096
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "GH200": 989.0, "B200": 2250.0, "A100": 312.0,
                    "L40S": 362.0}  # dense bf16 tensor-core peaks (SXM where a card has variants)


@dataclass(frozen=True)
class Shape:
    """One model at the shape it trains: prompts x samples sequences, the preset's micro-batch and token budget."""

    model: str
    prompts: int
    samples: int
    max_prompt: int
    response: int
    micro_batch: int  # sequences a padded micro-batch holds (configs/model/*.yaml: ppo_micro_batch_size_per_gpu)
    token_budget: int  # tokens a packed micro-batch holds (verl's use_dynamic_bsz: ppo_max_token_len_per_gpu)
    checkpointing: bool  # activation recomputation, as the presets set it (configs/base/grpo.yaml)


# In the order a short GPU loan should measure them: the quickstart's model, then the target size
SHAPES = [
    Shape("smollm2-135m", 16, 8, 128, 256, 8, 16384, True),
    Shape("qwen2.5-1.5b", 16, 8, 256, 1024, 8, 16384, True),
    Shape("qwen2.5-0.5b", 16, 8, 256, 1024, 8, 16384, True),
]
# --dry-run: the same architectures, two layers of toy width, 4 x 2 sequences of a few tokens
DRY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 512, "head_dim": 16}
# flex last: it compiles, possibly once per packed length, the one path whose cost is not known beforehand
ATTENTION_PATHS = ["sdpa_padded", "varlen_packed", "sdpa_packed", "flash_attention_2", "flash_attention_4",
                   "flex_packed"]
WARMUP_CAP_S = 120  # a path whose warm-up step takes longer is recorded as slow, not timed
LOGPROB_TOKENS = 4096  # the row loops take ~1 ms a token: every log-prob path gets the same slice, cost is linear
LOGPROB_PATHS = ["rowloop_bf16", "rowloop_fp32", "vectorised_fp32", "chunked_fp32"]


# ----- the batch


def draw_lengths(shape: Shape, seed: int = 0) -> list[tuple[int, int]]:
    """(prompt, response) tokens of every sequence: a prompt's samples share its length; responses run to the limit."""
    rng = random.Random(seed)
    lengths = []
    for _ in range(shape.prompts):
        prompt = rng.randint(max(1, shape.max_prompt // 2), shape.max_prompt)
        lengths += [(prompt, shape.response)] * shape.samples
    return lengths


def padded_micro_batches(lengths: list[int], size: int) -> list[list[int]]:
    """Indices of the sequences of each padded micro-batch: `size` at a time, in order (verl's split)."""
    return [list(range(start, min(start + size, len(lengths)))) for start in range(0, len(lengths), size)]


def packed_micro_batches(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices of each packed micro-batch: sequences in order until the next would pass `budget` tokens (a longer
    one goes alone)."""
    batches, current, used = [], [], 0
    for index, length in enumerate(lengths):
        if current and used + length > budget:
            batches.append(current)
            current, used = [], 0
        current.append(index)
        used += length
    return batches + ([current] if current else [])


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


# ----- log-probs


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


# ----- one model, every path


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


class Bench:
    """One model's random-weight actor and its batch; runs the paths and keeps each one's record."""

    def __init__(self, shape: Shape, device: str, dry_run: bool, steps: int, seed: int = 0):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        self.torch, self.shape, self.device, self.steps = torch, shape, device, steps
        values = {k: v for k, v in json.loads((MODELS_DIR / f"{shape.model}.json").read_text()).items()
                  if not k.startswith("_") and k != "architectures"}
        if dry_run:
            heads = values["num_attention_heads"]
            values.update(DRY, num_attention_heads=heads, num_key_value_heads=values["num_key_value_heads"],
                          hidden_size=heads * DRY["head_dim"], bos_token_id=None, eos_token_id=None, pad_token_id=None)
        config = AutoConfig.for_model(**values)
        torch.manual_seed(seed)
        self.dtype = torch.bfloat16 if device == "cuda" else torch.float32
        with torch.device(device):  # initialised where it runs, not on the host and then copied
            self.model = AutoModelForCausalLM.from_config(config, dtype=self.dtype).train()
        if shape.checkpointing:
            self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.config.use_cache = False
        drawn = draw_lengths(shape, seed)
        self.lengths, self.prompts = [p + r for p, r in drawn], [p for p, _ in drawn]
        generator = torch.Generator().manual_seed(seed)
        self.tokens = [torch.randint(0, config.vocab_size, (n,), generator=generator) for n in self.lengths]
        self.reference: dict | None = None

    def _inputs(self, indices: list[int], packed: bool):
        """input_ids, the mask or position ids, and for every sequence its (row, start) in the micro-batch."""
        torch, device = self.torch, self.device
        if packed:
            ids = torch.cat([self.tokens[i] for i in indices])[None].to(device)
            positions = torch.cat([torch.arange(self.lengths[i]) for i in indices])[None].to(device)
            offsets = [0]
            for i in indices[:-1]:
                offsets.append(offsets[-1] + self.lengths[i])
            return {"input_ids": ids, "position_ids": positions}, [(0, o) for o in offsets]
        longest = max(self.lengths[i] for i in indices)
        ids = torch.zeros(len(indices), longest, dtype=torch.long)
        mask = torch.zeros(len(indices), longest, dtype=torch.long)
        for row, i in enumerate(indices):  # left padding, as verl's batches are laid out
            ids[row, longest - self.lengths[i]:] = self.tokens[i]
            mask[row, longest - self.lengths[i]:] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        places = [(row, longest - self.lengths[i]) for row, i in enumerate(indices)]
        return {"input_ids": ids.to(device), "attention_mask": mask.to(device),
                "position_ids": positions.to(device)}, places

    def _micro_step(self, indices: list[int], packed: bool, keep: dict | None) -> int:
        """Forward and backward of one micro-batch; the loss is the mean response log-prob (a policy loss's
        shape). Returns its real tokens; with `keep`, stores each sequence's hidden states and log-probs."""
        torch = self.torch
        inputs, places = self._inputs(indices, packed)
        hidden = self.model.model(**inputs).last_hidden_state
        rows, labels, spans = [], [], []
        for (row, start), i in zip(places, indices):
            n = self.lengths[i]
            rows.append(hidden[row, start:start + n - 1])
            labels.append(inputs["input_ids"][row, start + 1:start + n])
            spans.append(n - 1)
        flat = torch.cat(rows)
        logp = logprobs(flat, self.model.lm_head.weight, torch.cat(labels), "chunked_fp32", torch)
        response = torch.cat([torch.arange(n) >= self.prompts[i] - 1 for n, i in zip(spans, indices)]).to(flat.device)
        loss = -(logp * response).sum() / response.sum()
        loss.backward()
        if keep is not None:
            for i, h, lp in zip(indices, flat.detach().split(spans), logp.detach().split(spans)):
                keep[i] = (h.float().cpu(), lp.float().cpu())
        return sum(self.lengths[i] for i in indices)

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def attention_path(self, path: str) -> dict:
        torch = self.torch
        why = unavailable(path, self.device)
        if why:
            return {"status": "unavailable", "why": why}
        packed = path != "sdpa_padded"
        implementation = {"sdpa_padded": "sdpa", "sdpa_packed": "sdpa", "flex_packed": "flex_attention",
                          "varlen_packed": VARLEN}.get(path, path)
        if implementation == VARLEN:
            register_varlen()
        self.model.set_attn_implementation(implementation)
        batches = (packed_micro_batches(self.lengths, self.shape.token_budget) if packed else
                   padded_micro_batches(self.lengths, self.shape.micro_batch))
        seconds, keep = [], {}
        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        for step in range(self.steps + 1):  # step 0: warm-up (kernels chosen, compiled), kept for agreement
            self.model.zero_grad(set_to_none=True)
            self._sync()
            began = time.perf_counter()
            tokens = sum(self._micro_step(b, packed, keep if step == 0 else None) for b in batches)
            self._sync()
            if step:
                seconds.append(time.perf_counter() - began)
            elif time.perf_counter() - began > WARMUP_CAP_S:  # a path that recompiles per length: said, not waited on
                return {"status": "slow", "why": f"its warm-up step took {time.perf_counter() - began:.0f} s "
                        f"(> {WARMUP_CAP_S} s): not timed further", "warmup_s": round(time.perf_counter() - began, 1)}
        attended = tokens if packed else sum(len(b) * max(self.lengths[i] for i in b) for b in batches)
        record = {"status": "ok", "micro_batches": len(batches), "tokens": tokens, "tokens_with_padding": attended,
                  "seconds": [round(s, 4) for s in seconds]}
        median = statistics.median(seconds)
        record["median_s"] = round(median, 4)
        record["tokens_per_s"] = round(tokens / median, 1)
        flops = model_flops(self.model, tokens, sum(n * n for n in self.lengths))
        peak = peak_tflops(torch.cuda.get_device_name()) if self.device == "cuda" else None
        record["mfu"] = round(flops / median / (peak * 1e12), 4) if peak else None
        if self.device == "cuda":
            record["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if path == "sdpa_padded":
            self.reference = keep
        elif self.reference:
            record["agreement"] = agreement(self.reference, keep, torch)
        return record

    def logprob_path(self, path: str):
        """lm_head, log-probs and backward over LOGPROB_TOKENS of a packed micro-batch: (record, the log-probs)."""
        torch = self.torch
        width = self.model.config.hidden_size
        tokens = min(LOGPROB_TOKENS, self.shape.token_budget, sum(self.lengths))
        generator = torch.Generator().manual_seed(1)
        hidden = torch.randn(tokens, width, generator=generator).to(self.device, self.dtype).requires_grad_()
        labels = torch.randint(0, self.model.config.vocab_size, (tokens,), generator=generator).to(self.device)
        weight = self.model.lm_head.weight
        seconds, values = [], None
        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        for step in range(self.steps + 1):
            hidden.grad = None
            self._sync()
            began = time.perf_counter()
            out = logprobs(hidden, weight, labels, path, torch)
            out.sum().backward()
            self._sync()
            if step:
                seconds.append(time.perf_counter() - began)
            values = out.detach().float().cpu()
        self.model.zero_grad(set_to_none=True)
        record = {"status": "ok", "tokens": tokens, "seconds": [round(s, 4) for s in seconds],
                  "median_s": round(statistics.median(seconds), 4)}
        if self.device == "cuda":
            record["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        return record, values


def agreement(reference: dict, other: dict, torch) -> dict:
    """Largest relative difference of hidden states and largest absolute difference of log-probs, per sequence."""
    hidden, logp = 0.0, 0.0
    for i, (h0, lp0) in reference.items():
        h1, lp1 = other[i]
        hidden = max(hidden, float((h1 - h0).norm() / h0.norm().clamp(min=1e-12)))
        logp = max(logp, float((lp1 - lp0).abs().max()))
    return {"hidden_max_rel": round(hidden, 6), "logprob_max_abs": round(logp, 6)}


# ----- the run


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def table(record: dict) -> str:
    lines = [f"# Actor forward + backward, path against path ({record['device']}, torch {record['torch']}, "
             f"transformers {record['transformers']})", ""]
    for name, model in record["models"].items():
        shape = model.get("shape", {})
        lines += [f"## {name}: {shape.get('prompts')} x {shape.get('samples')} sequences, prompts <= "
                  f"{shape.get('max_prompt')}, responses {shape.get('response')} tokens; checkpointing "
                  f"{shape.get('checkpointing')}", "",
                  "| path | status | s/step (median) | tokens/s | MFU | peak GiB | hidden rel. diff | log-prob diff |",
                  "|---|---|---|---|---|---|---|---|"]
        for path, r in model.get("attention", {}).items():
            a = r.get("agreement", {})
            lines.append(f"| {path} | {r['status']}{': ' + r['why'] if r.get('why') else ''} | {r.get('median_s', '')}"
                         f" | {r.get('tokens_per_s', '')} | {r.get('mfu', '')} | {r.get('peak_memory_gib', '')} | "
                         f"{a.get('hidden_max_rel', '')} | {a.get('logprob_max_abs', '')} |")
        lines += ["", "| log-prob path | status | s (median) | tokens | peak GiB | diff to chunked_fp32 |",
                  "|---|---|---|---|---|---|"]
        for path, r in model.get("logprob", {}).items():
            lines.append(f"| {path} | {r['status']}{': ' + r['why'] if r.get('why') else ''} | "
                         f"{r.get('median_s', '')} | {r.get('tokens', '')} | {r.get('peak_memory_gib', '')} | "
                         f"{r.get('diff_to_chunked', '')} |")
        lines.append("")
    return "\n".join(lines)


def run(out: Path, models: list[str], attention: list[str], logprob: list[str], steps: int, dry_run: bool,
        device: str) -> dict:
    import torch
    import transformers

    out.mkdir(parents=True, exist_ok=True)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    record = {"device": name, "torch": torch.__version__, "transformers": transformers.__version__,
              "dry_run": dry_run, "steps": steps, "models": {}}

    def save() -> None:
        write_atomic(out / "actor_bench.json", json.dumps(record, indent=1))
        write_atomic(out / "actor_bench.md", table(record))

    shapes = {s.model: s for s in SHAPES}
    earlier = previous_models(out / "actor_bench.json", record)
    for model in models:
        shape = shapes[model]
        if dry_run:
            shape = Shape(model, 4, 2, 12, 8, 3, 40, shape.checkpointing)
        if model in earlier and complete(earlier[model], attention, logprob):
            record["models"][model] = earlier[model]  # a command cut off after this model: not measured again
            print(f"[actor-bench] {model}: measured by an earlier command ({out / 'actor_bench.json'})", flush=True)
            continue
        entry = record["models"][model] = {"shape": asdict(shape), "attention": {}, "logprob": {}}
        began = time.perf_counter()
        bench = Bench(shape, device, dry_run, steps)
        entry["build_s"] = round(time.perf_counter() - began, 2)
        for path in attention:
            print(f"[actor-bench] {model} {path} ...", flush=True)
            try:
                entry["attention"][path] = bench.attention_path(path)
            except Exception as error:  # noqa: BLE001 - a path that fails is a result; the others still run
                entry["attention"][path] = {"status": "failed", "why": f"{type(error).__name__}: {error}"[:500]}
                traceback.print_exc()
                if device == "cuda":
                    torch.cuda.empty_cache()
            print(f"[actor-bench] {model} {path}: {summary_of(entry['attention'][path])}", flush=True)
            save()
        values = {}
        for path in logprob:
            try:
                entry["logprob"][path], values[path] = bench.logprob_path(path)
            except Exception as error:  # noqa: BLE001
                entry["logprob"][path] = {"status": "failed", "why": f"{type(error).__name__}: {error}"[:500]}
                traceback.print_exc()
        for path, result in entry["logprob"].items():
            if path in values and "chunked_fp32" in values:
                result["diff_to_chunked"] = round(float((values[path] - values["chunked_fp32"]).abs().max()), 6)
            print(f"[actor-bench] {model} log-probs {path}: {summary_of(result)}", flush=True)
        del bench
        if device == "cuda":
            torch.cuda.empty_cache()
        save()
    return record


def previous_models(path: Path, record: dict) -> dict:
    """The models an earlier command measured into `path` on the same device, torch and settings (the kit's
    commands end at 10 minutes: a stage cut off resumes at the model it was measuring)."""
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    same = all(before.get(k) == record[k] for k in ("device", "torch", "transformers", "dry_run", "steps"))
    return before.get("models", {}) if same else {}


def complete(entry: dict, attention: list[str], logprob: list[str]) -> bool:
    return set(attention) <= set(entry.get("attention", {})) and set(logprob) <= set(entry.get("logprob", {}))


def summary_of(result: dict) -> str:
    if result.get("status") != "ok":
        return f"{result.get('status')} ({result.get('why')})"
    parts = [f"{result['median_s']} s"]
    if result.get("tokens_per_s"):
        parts.append(f"{result['tokens_per_s']:.0f} tok/s")
    if result.get("mfu") is not None:
        parts.append(f"MFU {result['mfu']:.1%}")
    if result.get("peak_memory_gib") is not None:
        parts.append(f"{result['peak_memory_gib']} GiB")
    if result.get("agreement"):
        parts.append(f"hidden {result['agreement']['hidden_max_rel']:.2g}, log-prob "
                     f"{result['agreement']['logprob_max_abs']:.2g} from sdpa_padded")
    if result.get("diff_to_chunked") is not None:
        parts.append(f"{result['diff_to_chunked']:.2g} from chunked_fp32")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default=",".join(s.model for s in SHAPES))
    parser.add_argument("--attention", default=",".join(ATTENTION_PATHS))
    parser.add_argument("--logprob", default=",".join(LOGPROB_PATHS))
    parser.add_argument("--steps", type=int, default=3, help="timed steps per path, after one warm-up")
    parser.add_argument("--dry-run", action="store_true", help="toy sizes on the CPU: every path run and checked")
    args = parser.parse_args(argv)
    import torch

    known = {s.model for s in SHAPES}
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in known] + [
        p for p in args.attention.split(",") if p and p not in ATTENTION_PATHS] + [
        p for p in args.logprob.split(",") if p and p not in LOGPROB_PATHS]
    if unknown:
        print(f"actor_bench: unknown {unknown}; models {sorted(known)}, attention paths {ATTENTION_PATHS}, "
              f"log-prob paths {LOGPROB_PATHS}", file=sys.stderr)
        return 2
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("actor_bench: no CUDA device visible to torch; on a CPU run it with --dry-run", file=sys.stderr)
        return 2
    record = run(args.out, models, [p for p in args.attention.split(",") if p],
                 [p for p in args.logprob.split(",") if p], args.steps, args.dry_run, device)
    print(table(record))
    failed = [f"{m}/{p}" for m, e in record["models"].items() for kind in ("attention", "logprob")
              for p, r in e[kind].items() if r["status"] == "failed"]
    if failed:
        print(f"actor_bench: failed paths: {', '.join(failed)} (their errors above and in actor_bench.json)",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
