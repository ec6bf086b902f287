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
Imports torch and transformers only (gpu_kit's rule: nothing of the project); the paths themselves are in
gpu_kit/actor_paths.py, the record's table and resume in gpu_kit/actor_bench_record.py.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from gpu_kit.actor_bench_record import complete, previous_models, summary_of, table, write_atomic
from gpu_kit.actor_paths import (LOGPROB_PATHS, VARLEN, agreement, logprobs, model_flops, peak_tflops, register_varlen,
                                 unavailable)

MODELS_DIR = Path(__file__).resolve().parent / "models"


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


# ----- one model, every path


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


# ----- the run


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
