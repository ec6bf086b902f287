"""The HF evaluator on a CPU, two ways of decoding the quickstart's held-out suite greedily, in one process,
alternating (issue 49: the quickstart's verdict sooner):

- `--compare attention`: transformers' sdpa against utils/gqa_sdpa.py (key/value heads read in place);
- `--compare greedy`: transformers' `generate()` against the evaluator's own greedy loop, which drops each row
  from the batch once it has stopped;
- `--compare prompts`: every item asked against each distinct prompt asked once, its answer given to every item
  that asks it (evaluation.runner.ask_once_per_prompt: the quickstart's 650 items are 403 prompts).

    python bench/bench_eval_hf.py --compare greedy            # SmolLM2, configs/eval/quickstart.yaml, all 650 items
    python bench/bench_eval_hf.py --compare attention --limit 64 --repeats 1
    python bench/bench_eval_hf.py --compare prompts

Both arms decode the same left-padded batches (the suite's batch size, 64); their completions must be the same
text for every item (the base model's cached evaluation stays valid), and the script says so or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/...py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", choices=("attention", "greedy", "prompts"), default="greedy")
    parser.add_argument("--config", default="configs/eval/quickstart.yaml")
    parser.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M-Instruct, offline)")
    parser.add_argument("--limit", type=int, default=None, help="the suite's first N items (default: all)")
    parser.add_argument("--repeats", type=int, default=2, help="alternate the arms this often; keep each one's best")
    parser.add_argument("--out", default=None, help="default: bench/results/bench_eval_hf_<compare>.json")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    from evaluation.backends.base import GenRequest
    from evaluation.backends.hf import build_hf_backend
    from evaluation.config import load_config
    from evaluation.runner import ask_once_per_prompt
    from evaluation.suite import build_suite
    from utils.gqa_sdpa import GQA_SDPA
    from utils.offline_models import prepare_smollm2

    model = args.model or str(prepare_smollm2())
    cfg = load_config(args.config, [f"model.path={model}", "decoding=[greedy]"])
    sampling = cfg.sampling.__class__(**{**cfg.sampling.__dict__, "temperature": 0.0, "n": 1})
    items = build_suite(cfg)[:args.limit]
    requests = [GenRequest(i.item_id, i.messages, [0]) for i in items]
    backend = build_hf_backend(cfg.model, sampling)
    assert backend.model.config._attn_implementation == GQA_SDPA, backend.model.config._attn_implementation

    def set_attention(implementation: str):
        return lambda: backend.model.set_attn_implementation(implementation)

    def set_greedy_loop(drop_stopped_rows: bool):
        return lambda: setattr(backend, "drop_stopped_rows", drop_stopped_rows)

    same_prompt = ask_once_per_prompt(requests)
    every_item = {r.key: [r] for r in requests}

    def ask(groups: dict):
        return lambda: groups

    # the old way first, the new one second; the arms' names say which is which in the record
    arms = {"attention": {"sdpa": set_attention("sdpa"), GQA_SDPA: set_attention(GQA_SDPA)},
            "greedy": {"generate": set_greedy_loop(False), "drop_stopped_rows": set_greedy_loop(True)},
            "prompts": {"every_item": ask(every_item), "distinct_prompts": ask(same_prompt)}}[args.compare]

    def arm(name: str) -> tuple[float, dict]:
        groups = arms[name]() or every_item
        got: dict = {}

        def record(req, completions):
            for asking in groups[req.key]:
                got.setdefault(asking.key, completions[0].text)

        began = time.perf_counter()
        backend.generate([group[0] for group in groups.values()], sampling, record)
        return time.perf_counter() - began, got

    runs: dict[str, list[float]] = {name: [] for name in arms}
    old, new = arms
    texts = {}
    for _ in range(args.repeats):
        for name in runs:
            seconds, texts[name] = arm(name)
            runs[name].append(seconds)
        print(", ".join(f"{k} {v[-1]:.1f} s" for k, v in runs.items()), flush=True)
    same = texts[old] == texts[new]
    best = {k: min(v) for k, v in runs.items()}
    result = {"compare": args.compare, "config": args.config, "model": model, "items": len(requests),
              "batch_size": cfg.model.batch_size, "max_tokens": sampling.max_tokens,
              "seconds": {k: [round(s, 2) for s in v] for k, v in runs.items()},
              "best": {k: round(v, 2) for k, v in best.items()}, "speedup": round(best[old] / best[new], 3),
              "same_completions": same, "threads": os.cpu_count()}
    out = Path(args.out or f"bench/results/bench_eval_hf_{args.compare}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"| {args.compare} | best of {args.repeats} (s) | all (s) |\n|---|---:|---|")
    for name, values in runs.items():
        print(f"| {name} | {best[name]:.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    print(f"{len(requests)} items: {result['speedup']}x; the same completion for every item: {same}")
    if not same:
        differing = [k for k in texts[old] if texts[old][k] != texts[new].get(k)]
        raise SystemExit(f"completions differ on {len(differing)} items, e.g. {differing[:3]}")
    return result


if __name__ == "__main__":
    main()
