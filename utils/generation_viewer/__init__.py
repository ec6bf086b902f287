"""A self-contained HTML page of a run's generations: what the model wrote, what was expected, what it scored.

    python -m utils.generation_viewer checkpoints/rg-grpo/quickstart -o page.html    # a training run
    python -m utils.generation_viewer outputs/eval/smoke/generations.jsonl -o eval.html   # an evaluator run
    python -m utils.generation_viewer RUN outputs/eval/X -o both.html                 # several inputs on one page

Inputs (files or folders; a folder is searched for the files below, `global_step_*` checkpoint folders skipped):
- training dumps of training/trainer/generations.py: `generations/train/<step>.jsonl` (prompt, response, ground_truth, pred,
  score, acc, answer_found, reason, response_length) and `generations/train/steps.jsonl` (per-step task means over
  all of a step's responses: the training chart);
- verl's dumps, `<step>.jsonl` with input, output, gts, score, step, uid and, for validation, our reward fields
  (`trainer.validation_data_dir`, by default `generations/val`); a folder named val*/valid* is validation, any other
  verl dump is `rollout` (verl's own training dump, `trainer.rollout_data_dir`);
- the evaluator's `generations.jsonl` (evaluation/runner.py's make_record): source `eval`, task `<group>/<task_key>`.

The page embeds the rows as JSON and renders them with a small script of its own (no network, no server): filters by
source, step, task, score range, reason and text, kept in the URL hash so that a link reopens the same view
(`page.html#task=chain_sum&step=40&score_max=0`; keys source, step ("-" for none), task, reason, score_min, score_max,
q, order (empty: newest step first; oldest, score, -score) and page); prompt, response (the extracted <answer> block
marked), expected and extracted answer side by side, 25 rows a page (only those are in the DOM); a per-task table of
the current filter and per-task reward over steps (inline SVG). Prompts and responses longer than --max-chars are cut.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

from utils.generation_viewer.page import build_page
from utils.generation_viewer.rows import DEFAULT_MAX_CHARS, find_files, load, normalize, read_jsonl, reward_series

__all__ = ["build_page", "find_files", "load", "main", "normalize", "read_jsonl", "reward_series"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utils.generation_viewer", description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="RUN_OR_FILE",
                        help="a training run folder (trainer.default_local_dir), a generations folder, a <step>.jsonl, "
                             "or an evaluator's generations.jsonl (or its folder)")
    parser.add_argument("-o", "--output", default="generations.html", help="the HTML file to write")
    parser.add_argument("--title", default=None, help="page title (default: the inputs)")
    parser.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS,
                        help="prompt and response characters kept per generation (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        rows, summaries = load([Path(p) for p in args.inputs], args.max_chars)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: no generations found in {', '.join(args.inputs)} (expected <step>.jsonl dumps or an "
              "evaluator's generations.jsonl)", file=sys.stderr)
        return 1
    page = build_page(rows, summaries, args.title or " + ".join(args.inputs))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, output)
    counts = defaultdict(int)
    for row in rows:
        counts[row["source"]] += 1
    listed = ", ".join(f"{source} {count}" for source, count in sorted(counts.items()))
    print(f"wrote {output}: {len(rows)} generations ({listed}), {len(page.encode()) / 1e6:.1f} MB")
    return 0
