"""A base model and its trained export beside Reasoning Gym's published models, on the same published items.

    .venv/bin/python bench/bench_published.py --base ~/.cache/rg-grpo/smollm2-135m-instruct \
        --trained checkpoints/rg-grpo/quickstart/heldout/model --category arithmetic --out /tmp/published \
        --figure bench/figures/published_smollm2_arithmetic.png model.dtype=float32 model.batch_size=64 \
        sampling.max_tokens=128 sampling.n=1 pass_k=[1]

Each model is evaluated by the command a user runs (evaluation/evaluate_model.py --config SUITE --compare-published,
--backend hf; a rerun resumes), with the same key=value overrides, then base and trained are compared item by item
and drawn together among the published models (one star each, on the items the trained model cannot have drawn:
the trained one runs with --trained-here). Prints, for all items and for those, a markdown table per category: each
model's accuracy and rank among the published ones, and the paired base -> trained change with its interval.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/eval/rg_zero_shot_easy.yaml", help="a published suite")
    p.add_argument("--base", required=True, help="the base model's folder")
    p.add_argument("--trained", required=True, help="the trained export's folder")
    p.add_argument("--category", action="append", help="evaluate only this category (repeatable)")
    p.add_argument("--backend", default="hf")
    p.add_argument("--out", required=True, help="folder for both evaluations and the comparison")
    p.add_argument("--figure", help="where to write the figure (default OUT/published.png)")
    p.add_argument("overrides", nargs="*", help="key=value overrides for both evaluations")
    return p.parse_args(argv)


def evaluate(args, label: str, model: str, *flags: str) -> dict:
    out = os.path.join(args.out, label)
    cmd = [sys.executable, "evaluation/evaluate_model.py", "--config", args.config, "--model", model, "--backend",
           args.backend, "--output", out, "--compare-published", *flags,
           *sum((["--category", c] for c in args.category or []), []), *args.overrides]
    print("+ " + " ".join(cmd), flush=True)
    with open(os.path.join(args.out, f"{label}.log"), "a") as log:
        code = subprocess.call(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if code != 0:
        raise SystemExit(f"{label}: evaluate_model.py exited {code}; see {args.out}/{label}.log")
    with open(os.path.join(out, "published.json")) as fh:
        return json.load(fh)


def main(argv=None) -> int:
    from evaluation.compare import interval_text, paired_interval, verdict
    from evaluation.published_compare import SUBSET_TEXT, plot_published, read_questions, standing, subset_items
    from evaluation.report import fmt, load_results

    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    base = evaluate(args, "base", args.base)
    trained = evaluate(args, "trained", args.trained, "--trained-here")  # headline: the items it cannot have seen
    figure = args.figure or os.path.join(args.out, "published.png")
    plot_published([dict(base, headline="unseen"), trained], figure, labels=["base", "trained"])
    acc_b, acc_t = (load_results(os.path.join(args.out, label))["item_accuracy"] for label in ("base", "trained"))
    for subset, members in subset_items(read_questions(os.path.join(args.out, "base"))).items():
        print(f"\n{base['set']} set, {SUBSET_TEXT[subset]}; accuracy, rank among the published models; base -> "
              "trained, paired 95% interval\n")
        print("| category | items | base | base's rank | trained | trained's rank | change | paired 95% CI | |")
        print("|---|---:|---:|---|---:|---|---:|---:|---|")
        sub_b, sub_t = base["subsets"][subset], trained["subsets"][subset]
        for row_b, row_t in zip(sub_b["categories"] + [sub_b["overall"]], sub_t["categories"] + [sub_t["overall"]]):
            paired = [i for i in members if i in acc_b and i in acc_t
                      and row_b["key"] in ("overall", i.split("/", 1)[0])]
            interval = paired_interval(acc_b, acc_t, paired)
            delta = sum(acc_t[i] - acc_b[i] for i in paired) / len(paired) if paired else None
            print(f"| {row_b['key']} | {row_b['items']} | {fmt(row_b['accuracy'])} | {standing(row_b)} | "
                  f"{fmt(row_t['accuracy'])} | {standing(row_t)} | {'-' if delta is None else format(delta, '+.3f')} "
                  f"| {interval_text({'ci95': interval})} | {verdict(interval)} |")
    print(f"\nwrote {figure}, {args.out}/{{base,trained}}/published.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
