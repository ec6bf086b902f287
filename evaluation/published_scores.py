"""Reasoning Gym's published zero-shot results, rescored with this project's reward, as one compact data file.

The paper's runs (open-thought/reasoning-gym-eval, Apache-2.0: every question, completion and score of 10 models a
set) were scored by the Reasoning Gym of their day; several scorers changed since. A model evaluated here is scored by
`envs.reward`, so the published completions are scored again by the same code, on the same items: each published
item is matched by its question text to the item the shipped suite (configs/eval/rg_zero_shot_{easy,hard}.yaml) draws,
and every completion is scored as the suite scores (evaluation.runner.score_completions' reward options, isolated
with a timeout). A published item whose question this Reasoning Gym no longer draws is left out and counted.

    python -m evaluation.published_scores --eval-repo PATH/TO/reasoning-gym-eval     # once; writes DATA (committed)

The file: per set, the suite's question hashes per task (sha256, 16 hex digits, by position), and per model and task
the rescored accuracy of each position (the mean over its completions; null where the model's file has no such
item), the items left out, and the published average score for reference.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "evaluation" / "data" / "rg_zero_shot_published.json.gz"
SETS = ("easy", "hard")
RESULTS = Path("reasoninggym-paper-experiments") / "zero-shot"
ABOUT = ("Reasoning Gym's published zero-shot evaluations (arXiv 2505.24760), from open-thought/reasoning-gym-eval "
         "(Apache License 2.0, the Reasoning Gym authors), every completion rescored by this project's reward "
         "(envs.reward) on the items configs/eval/rg_zero_shot_{set}.yaml draws; see NOTICE")


def question_hash(question: str) -> str:
    return hashlib.sha256(question.encode()).hexdigest()[:16]


def position(item) -> int:
    """A suite item's position in its task (the last part of its item_id, "<group>/<task>/<position>")."""
    return int(item.item_id.rsplit("/", 1)[1])


def suite_path(name: str) -> Path:
    return REPO / "configs" / "eval" / f"rg_zero_shot_{name}.yaml"


def model_folders(eval_repo: Path, name: str) -> list[Path]:
    """The published runs of a set: zero-shot/<set>/<model>_<date>/."""
    root = eval_repo / RESULTS / name
    if not root.is_dir():
        raise SystemExit(f"{root}: no such folder; --eval-repo must be a clone of open-thought/reasoning-gym-eval")
    return sorted(path for path in root.iterdir() if path.is_dir())


def match_results(results: list[dict], items: dict):
    """Yields (published result, the suite item it answers or None when this Reasoning Gym no longer draws its
    question). `items` is {question: [SuiteItem, ...] in position order}: a task can draw one question at several
    positions, and the k-th published result with a question is the k-th position holding it."""
    seen: Counter = Counter()
    for result in results:
        holding = items.get(result["question"], [])
        yield result, holding[seen[result["question"]]] if seen[result["question"]] < len(holding) else None
        seen[result["question"]] += 1


def completion_texts(result: dict) -> list[str]:
    """A published result's completions (its best one when the file lists none); a missing text is empty."""
    texts = [c["full_model_response"] for c in result.get("completions") or []] or [result["best_full_model_response"]]
    return [text or "" for text in texts]


def rescore_file(path: Path, items: dict, options) -> dict:
    """One published task file against the suite's items of that task (match_results): the rescored accuracy by
    position, the items left out, the published average score."""
    from evaluation.backends.base import Completion
    from evaluation.runner import score_completions

    published = json.loads(path.read_text())
    accuracy: dict[int, float] = {}
    left_out = 0
    for result, item in match_results(published["results"], items):
        if item is None:
            left_out += 1
            continue
        # the published files do not say which completions hit their token limit: scored as complete
        completions = [Completion(text=text, num_tokens=None, finish_reason=None) for text in completion_texts(result)]
        scored = score_completions(item, completions, options)
        accuracy[position(item)] = sum(float(s["acc"]) for s in scored) / len(scored)
    return {"accuracy": accuracy, "left_out": left_out,
            "published_mean_score": published.get("average_mean_score")}


def suite_items(name: str, only: set[str] | None = None) -> tuple:
    """The suite of set `name` (`only`: just these "<category>/<task>" keys) as the evaluator scores it: (its reward
    options, {task key: {question: [SuiteItem, ...] in position order}}, {task key: [question hash by position]})."""
    import dataclasses

    from evaluation.config import load_config
    from evaluation.reward_section import reward_options
    from evaluation.suite import build_suite

    cfg = load_config(str(suite_path(name)), ["model.path=published"])
    if only:
        cfg = dataclasses.replace(cfg, categories=[
            dataclasses.replace(c, tasks=[t for t in c.tasks if f"{c.name}/{t.key}" in only]) for c in cfg.categories])
    by_task: dict[str, dict[str, list]] = {}
    hashes: dict[str, list] = {}
    for item in build_suite(cfg):
        assert position(item) == len(hashes.get(item.result_key, [])), item.item_id  # a task's items in order
        by_task.setdefault(item.result_key, {}).setdefault(item.entry["question"], []).append(item)
        hashes.setdefault(item.result_key, []).append(question_hash(item.entry["question"]))
    return reward_options(cfg), by_task, hashes


def rescore_set(eval_repo: Path, name: str, only: set[str] | None = None) -> dict:
    """Every published run of set `name` rescored (`only`: just these "<category>/<task>" keys)."""
    options, by_task, hashes = suite_items(name, only)
    sizes = {key: len(found) for key, found in hashes.items()}
    models: dict[str, dict] = {}
    left_out: Counter = Counter()
    for folder in model_folders(eval_repo, name):
        model = folder.name.rsplit("_", 2)[0]  # "<provider>_<model>_<date>_<time>" -> "<provider>_<model>"
        tasks = {}
        for path in sorted(folder.glob("*/*.json")):
            key = f"{path.parent.name}/{path.stem}"
            if key not in by_task:
                continue  # a task the suite does not hold (or one this Reasoning Gym cannot draw)
            scored = rescore_file(path, by_task[key], options)
            left_out[key] += scored["left_out"]
            tasks[key] = {"accuracy": [scored["accuracy"].get(pos) for pos in range(sizes[key])],
                          "left_out": scored["left_out"], "published_mean_score": scored["published_mean_score"]}
            print(f"[{name}] {model} {key}: {len(scored['accuracy'])} rescored, {scored['left_out']} left out",
                  flush=True)
        models[model] = tasks
    print(f"[{name}] items left out (this Reasoning Gym no longer draws their question), per task, all models: "
          f"{dict(sorted((k, v) for k, v in left_out.items() if v))}")
    return {"suite": str(suite_path(name).relative_to(REPO)), "hashes": hashes, "models": models}


def write(data: dict, path: Path) -> None:
    """Atomically: a gzip of compact JSON (a fixed mtime, so the same data gives the same bytes)."""
    tmp = path.with_suffix(".tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
        out.write(json.dumps(data, sort_keys=True, separators=(",", ":")).encode())
    tmp.replace(path)


def load(path: Path = DATA) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-repo", type=Path, required=True, help="a clone of open-thought/reasoning-gym-eval")
    parser.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    parser.add_argument("--out", type=Path, default=DATA)
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":  # the suite's items as evaluate_model.py draws them (ensure_hash_seed)
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "evaluation.published_scores", *(argv or sys.argv[1:])])
    from importlib.metadata import version

    from evaluation.config import load_config
    from evaluation.runner import scoring_options

    data = {"about": ABOUT, "reasoning_gym": version("reasoning-gym"), "metric": "accuracy (binarised, mean over "
            "an item's completions)", "scoring": scoring_options(load_config(str(suite_path("easy")),
                                                                             ["model.path=published"])),
            "sets": {name: rescore_set(args.eval_repo, name) for name in args.sets}}
    write(data, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
