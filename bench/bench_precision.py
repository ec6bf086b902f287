"""fp32 against bf16 on this CPU: the rollout's sampling, the actor's forward + backward, and how far their
log-probs agree (issue 49, item 3).

    python bench/bench_precision.py               # SmolLM2, the earlier CPU quickstart's first 4 prompts x 8, 48 tokens
    python bench/bench_precision.py --model tiny --repeats 1

Why: a CPU step is sampling (training/cpu_backend/sampling.py) and the actor's update, both fp32 today. CPUs with
bf16 units (`avx512_bf16`, AMX's `amx_bf16`) may run bf16 matmuls faster, but a run whose sampler and actor compute
in different precisions trains on log-probs that disagree (bypass mode takes the rollout's as the old ones). This
measures, in one process on the same rows: the sampler with fp32 weights and with bf16 weights; the actor's
forward + backward over the sampled sequences in micro-batches (fp32, bf16 autocast over fp32 weights as verl's
mixed precision runs it); and each pairing's log-prob mismatch on the same tokens (max and mean |diff|). A third
sampler runs under the same bf16 autocast over fp32 weights as the actor: one bf16 path for both.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/bench_precision.py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from bench.bench_decode import rows_parser

    parser = rows_parser(__doc__)
    parser.add_argument("--micro-batch", type=int, default=8, help="rows per forward + backward (the quickstart's)")
    return parser.parse_args(argv)


def cpu_bf16_units() -> list[str]:
    """The bf16 matrix/vector units this CPU reports (/proc/cpuinfo flags), e.g. ['avx512_bf16', 'amx_bf16']."""
    try:
        flags = next((line.split(":", 1)[1].split() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        return []
    return sorted(flag for flag in set(flags) if flag in ("avx512_bf16", "amx_bf16", "amx_tile", "avx_ne_convert"))


def sequences(rows: list[list[int]], sampled, pad_token_id: int):
    """Right-padded (input_ids, attention_mask, response_mask) of prompt + response rows."""
    import torch

    full = [prompt + s.token_ids for prompt, s in zip(rows, sampled)]
    width = max(len(ids) for ids in full)
    input_ids = torch.full((len(full), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    response = torch.zeros_like(input_ids, dtype=torch.bool)
    for row, (prompt, ids) in enumerate(zip(rows, full)):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        mask[row, :len(ids)] = 1
        response[row, len(prompt):len(ids)] = True
    return input_ids, mask, response


def actor_log_probs(model, input_ids, mask, micro_batch: int, autocast_bf16: bool, backward: bool):
    """Log-probs of each next token (as verl's actor: log-softmax of the logits), per micro-batch, with a backward
    of their sum when `backward`; returns (log-probs aligned to input_ids[:, 1:], seconds)."""
    import torch

    outputs, start = [], time.perf_counter()
    for first in range(0, input_ids.shape[0], micro_batch):
        ids, att = input_ids[first:first + micro_batch], mask[first:first + micro_batch]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bf16), torch.set_grad_enabled(backward):
            logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
            log_probs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
        if backward:
            (log_probs * att[:, 1:]).sum().backward()
            model.zero_grad(set_to_none=True)
        outputs.append(log_probs.detach())
    return torch.cat(outputs), time.perf_counter() - start


def mismatch(sampler_log_probs, actor: "torch.Tensor", response) -> tuple[float, float]:
    """(max, mean) |sampler - actor| over the response tokens."""
    import torch

    diffs = []
    for row, lps in enumerate(sampler_log_probs):
        positions = response[row, 1:].nonzero().squeeze(-1)
        diffs.append((torch.tensor(lps) - actor[row, positions]).abs())
    every = torch.cat(diffs)
    return float(every.max()), float(every.mean())


def main() -> None:
    args = parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from bench.bench_decode import quickstart_rows
    from training.cpu_backend.sampling import SamplingSpec, sample_batch
    from utils.gqa_sdpa import use_gqa_sdpa

    path, tokenizer, rows = quickstart_rows(args.model, args.prompts, args.samples)
    fp32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    bf16 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
    for sampler in (fp32, bf16):
        use_gqa_sdpa(sampler)  # as the rollout server runs it
    spec, eos, pad = SamplingSpec(temperature=1.0, ignore_eos=True), {tokenizer.eos_token_id}, tokenizer.pad_token_id
    seeds = list(range(len(rows)))
    times: dict[str, list[float]] = {}
    sampled = {}
    samplers = (("fp32 weights", fp32, False), ("bf16 weights", bf16, False), ("bf16 autocast", fp32, True))
    for repeat in range(args.repeats):
        for name, model, autocast in samplers:  # autocast over fp32 weights: the actor's own bf16 path
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                sampled[name] = sample_batch(model, rows, [args.tokens] * len(rows), spec, eos, pad, seeds=seeds)
            times.setdefault(f"sampling, {name}", []).append(time.perf_counter() - start)
    fp32.set_attn_implementation("sdpa")  # the actor's path (verl's engine loads transformers' sdpa)
    fp32.train()
    actors, results = (("fp32", False), ("bf16 autocast", True)), {}
    for source, _, _ in samplers:  # the actor's timed runs are on the fp32 sampler's rows, alternating its arms
        input_ids, mask, response = sequences(rows, sampled[source], pad)
        for repeat in range(args.repeats if source == "fp32 weights" else 1):
            for arm, autocast in actors:
                log_probs, seconds = actor_log_probs(fp32, input_ids, mask, args.micro_batch, autocast, backward=True)
                if source == "fp32 weights":
                    times.setdefault(f"actor forward + backward, {arm}", []).append(seconds)
                results[(source, arm)] = mismatch([s.log_probs for s in sampled[source]], log_probs, response)

    lengths = sorted({len(r) for r in rows})
    print(f"{args.model}: {args.prompts} prompts ({lengths[0]}-{lengths[-1]} tokens) x {args.samples} samples, "
          f"{args.tokens} new tokens each, micro-batches of {args.micro_batch}, {torch.get_num_threads()} torch "
          f"threads, {args.repeats} run(s); CPU bf16 units: {', '.join(cpu_bf16_units()) or 'none'}\n")
    print("| arm | runs (s) | mean (s) |\n|---|---|---:|")
    for name, values in times.items():
        print(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.fmean(values):.2f} |")
    print("\n| sampler | actor | max abs log-prob diff | mean abs diff |\n|---|---|---:|---:|")
    for (source, arm), (worst, mean) in results.items():
        print(f"| {source} | {arm} | {worst:.2e} | {mean:.2e} |")


if __name__ == "__main__":
    main()
