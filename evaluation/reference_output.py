"""reasoning-gym's evaluation result file, written from our generations for scripts that read that layout.

`ROOT/local_<YYYYmmdd_HHMMSS>/results.json` holds `metadata` (timestamp, model, device, duration_seconds, max_tokens,
temperature, top_p, eval_repeats) and `categories: [{name, datasets: [{name, category, average_score,
total_examples, config, results: [{question, expected_answer, best_score, mean_score, completions: [{model_answer,
full_model_response, score}]}]}]}]`. Scores are binarised, as theirs; `average_score` is the mean of per-question
means. Composites of our schema appear as categories whose datasets are their member tasks.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from evaluation.config import EvalConfig
from evaluation.store import GenerationStore, atomic_write


def _question(samples: list[dict]) -> dict:
    scores = [float(r["accuracy"]) for r in samples]
    first = samples[0]
    return {"question": first.get("question"), "expected_answer": str(first.get("answer")),
            "best_score": max(scores), "mean_score": sum(scores) / len(scores),
            "completions": [{"model_answer": r.get("pred"), "full_model_response": r.get("response", ""),
                             "score": float(r["accuracy"])} for r in samples]}


def _dataset(group: str, key: str, task: str, config: dict, questions: list[dict], full: bool) -> dict:
    out = {"name": task, "category": group,
           "average_score": sum(q["mean_score"] for q in questions) / len(questions) if questions else 0.0,
           "total_examples": len(questions), "config": config}
    if full:
        out["results"] = questions
    if key != task:
        out["key"] = key  # the same dataset listed twice in one category
    return out


def reference_results(cfg: EvalConfig, records: list[dict], started: datetime, duration_s: float) -> dict:
    """Their results dict from our generation records (one per item and sample)."""
    by_task: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for rec in sorted(records, key=lambda r: (r["item_id"], int(r["sample"]))):
        if int(rec["sample"]) >= cfg.sampling.n:  # a resumed run may have asked for fewer samples
            continue
        by_task.setdefault((rec["group"], rec["task_key"]), {}).setdefault(rec["item_id"], []).append(rec)
    full = cfg.reference.save_full_results if cfg.reference else True

    def questions(group: str, key: str) -> list[dict]:
        return [_question(samples) for samples in by_task.get((group, key), {}).values()]

    categories = []
    for cat in cfg.categories:
        categories.append({"name": cat.name, "datasets": [
            _dataset(cat.name, t.key, t.task, {**t.config, "size": t.size, "seed": t.seed}, questions(cat.name, t.key),
                     full) for t in cat.tasks]})
    for comp in cfg.composites:
        datasets = []
        for m in comp.tasks:
            qs = questions(comp.name, m.key)
            datasets.append(_dataset(comp.name, m.key, m.task, {**m.config, "size": len(qs), "seed": comp.seed}, qs,
                                     full))
        categories.append({"name": comp.name, "datasets": datasets})
    out: dict = {}
    if cfg.reference is None or cfg.reference.save_metadata:
        out["metadata"] = {"timestamp": started.isoformat(), "model": cfg.model.path or cfg.model.base_url,
                           "device": cfg.model.backend, "duration_seconds": duration_s,
                           "max_tokens": cfg.sampling.max_tokens, "temperature": cfg.sampling.temperature,
                           "top_p": cfg.sampling.top_p, "eval_repeats": cfg.sampling.n}
    out["categories"] = categories
    return out


def write_reference_output(cfg: EvalConfig, out_dir: str, root: str, started: datetime, duration_s: float) -> str:
    """Write ROOT/local_<timestamp>/results.json from OUT_DIR/generations.jsonl; returns the file's path."""
    from evaluation.runner import GENERATIONS

    store = GenerationStore(os.path.join(out_dir, GENERATIONS))
    results = reference_results(cfg, list(store.records.values()), started, duration_s)
    path = os.path.join(root, f"local_{datetime.now().strftime('%Y%m%d_%H%M%S')}", "results.json")
    atomic_write(path, json.dumps(results, indent=2, default=str))
    return path
