"""Metrics over generation records: accuracy, raw score, pass@k, answer-found rate, length, bootstrap CIs.

Accuracy is binarised per sample (the reward's `accuracy`), averaged over all samples (the published tables' metric).
Confidence intervals resample *questions*: the samples of one item are not independent, and neither are two items
that ask the same question (a task with a small question space, such as one-digit sums, repeats its evaluation
split's few questions: the quickstart's 150 chain_sum items ask 19), which a model answers alike under greedy decoding.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections import Counter, defaultdict


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one item with `n` samples of which `c` are correct: 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per item, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def question_key(rec: dict) -> str:
    """A short key of the record's question (its item id where it has none): items with one key are one observation."""
    text = rec.get("question")
    return hashlib.blake2b(str(text).encode(), digest_size=8).hexdigest() if text else rec["item_id"]


def item_questions(records: list[dict]) -> dict[str, str]:
    """The question key of each item_id (what an interval resamples: evaluation.compare.paired_interval)."""
    return {rec["item_id"]: question_key(rec) for rec in records}


def clustered(values: list[float], clusters: list[str] | None) -> tuple[list[float], list[int]]:
    """The sum and count of `values` per cluster (one per value when `clusters` is None), in first-seen order."""
    if clusters is None:
        return list(values), [1] * len(values)
    sums: dict[str, float] = {}
    sizes: dict[str, int] = {}
    for value, key in zip(values, clusters):
        sums[key] = sums.get(key, 0.0) + value
        sizes[key] = sizes.get(key, 0) + 1
    return list(sums.values()), list(sizes.values())


def bootstrap_ci(values: list[float], resamples: int = 1000, alpha: float = 0.05, seed: int = 0,
                 clusters: list[str] | None = None) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of `values` (per-item means), resampling the clusters (`clusters[i]`:
    item i's question key) with all their items; without clusters, each item alone."""
    if not values:
        return (float("nan"), float("nan"))
    sums, sizes = clustered(values, clusters)
    if len(sums) == 1 or resamples <= 0:
        mean = sum(values) / len(values)
        return (mean, mean) if len(sums) == 1 else (float("nan"), float("nan"))
    rng = random.Random(seed)
    n = len(sums)
    means = []
    for _ in range(resamples):
        picks = rng.choices(range(n), k=n)
        means.append(sum(sums[i] for i in picks) / sum(sizes[i] for i in picks))
    means.sort()
    lo = means[int(math.floor(alpha / 2 * (resamples - 1)))]
    hi = means[int(math.ceil((1 - alpha / 2) * (resamples - 1)))]
    return (lo, hi)


def _item_accuracy(rec: dict) -> float:
    if "accuracy" in rec:
        return float(rec["accuracy"])
    return float(rec.get("score", 0.0) >= 1.0)


def item_accuracy(records: list[dict]) -> dict[str, float]:
    """Mean accuracy over each item's samples, by item_id."""
    by_item: dict[str, list[float]] = defaultdict(list)
    for rec in records:
        by_item[rec["item_id"]].append(_item_accuracy(rec))
    return {key: sum(values) / len(values) for key, values in by_item.items()}


def task_of(rec: dict) -> str:
    """A record's task row key: GROUP/TASK_KEY (one task may sit in several groups)."""
    return f"{rec['group']}/{rec['task_key']}"


def common_answer_share(records: list[dict]) -> float:
    """The accuracy of a model that answers every item of a task with that task's most common gold answer (exact
    match), over the items here: where a task's answers are lopsided (letter counts: mostly "1"), a model that
    learned to repeat one answer scores this much without reading a question. NaN when no item has an answer."""
    answers: dict[str, dict[str, str]] = defaultdict(dict)
    for rec in records:
        if rec.get("answer") is not None:
            answers[task_of(rec)][rec["item_id"]] = str(rec["answer"]).strip()
    items = sum(len(by_item) for by_item in answers.values())
    if not items:
        return float("nan")
    return sum(Counter(by_item.values()).most_common(1)[0][1] for by_item in answers.values()) / items


def repeated_answer_share(records: list[dict]) -> float:
    """The share of responses that give their task's most frequent extracted answer: near 1, the model answers most
    questions of a task alike (the quickstart at lr 3e-5, seed 1: "1" to 143 of 150 letter counts). NaN without
    responses; a response with no answer never counts as the repeated one."""
    answers: dict[str, list[str]] = defaultdict(list)
    for rec in records:
        answers[task_of(rec)].append(None if rec.get("pred") is None else str(rec["pred"]).strip())
    total = sum(len(given) for given in answers.values())
    if not total:
        return float("nan")
    return sum(max(Counter(a for a in given if a is not None).values(), default=0)
               for given in answers.values()) / total


def summarize(records: list[dict], pass_k: list[int], resamples: int = 1000) -> dict:
    """Metrics for one set of records (a task, a group or everything)."""
    by_item: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        by_item[rec["item_id"]].append(rec)
    item_acc = [sum(_item_accuracy(r) for r in recs) / len(recs) for recs in by_item.values()]
    questions = [question_key(recs[0]) for recs in by_item.values()]
    n = len(records)
    out = {
        "n_items": len(by_item),
        "n_questions": len(set(questions)),
        "n_samples": n,
        "accuracy": sum(_item_accuracy(r) for r in records) / n if n else float("nan"),
        "mean_score": sum(float(r.get("score", 0.0)) for r in records) / n if n else float("nan"),
        "answer_found": sum(bool(r.get("answer_found")) for r in records) / n if n else float("nan"),
        "mean_response_tokens": sum(int(r.get("num_tokens", 0)) for r in records) / n if n else float("nan"),
        "truncated": sum(r.get("finish_reason") == "length" for r in records) / n if n else float("nan"),
        "common_answer": common_answer_share(records),
        "repeated_answer": repeated_answer_share(records),
    }
    out["accuracy_ci95"] = list(bootstrap_ci(item_acc, resamples, clusters=questions))
    for k in pass_k:
        usable = [recs for recs in by_item.values() if len(recs) >= k]
        vals = [pass_at_k(len(recs), int(sum(_item_accuracy(r) for r in recs)), k) for recs in usable]
        out[f"pass@{k}"] = sum(vals) / len(vals) if vals else float("nan")
    return out


def aggregate(records: list[dict], pass_k: list[int], group_kinds: dict[str, str], resamples: int = 1000) -> dict:
    """Per task, per group (category / composite / benchmark) and overall metrics (benchmark groups left out)."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    by_group: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        by_task[task_of(rec)].append(rec)
        by_group[rec["group"]].append(rec)
    tasks = {}
    for key, recs in by_task.items():
        group, task_key = key.split("/", 1)
        tasks[key] = {"group": group, "task": task_key, "rg_task": recs[0].get("task"), **summarize(recs, pass_k, resamples)}
    groups = {name: {"kind": group_kinds.get(name, "category"), "tasks": sorted({r["task_key"] for r in recs}),
                     **summarize(recs, pass_k, resamples)}
              for name, recs in by_group.items()}
    judged = [r for r in records if group_kinds.get(r["group"]) != "benchmark"]  # benchmarks inform, apart
    return {"tasks": tasks, "groups": groups, "overall": summarize(judged, pass_k, resamples)}
