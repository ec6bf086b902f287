"""Base vs trained: per-task and per-group accuracy side by side with paired 95% intervals (markdown, JSON, PNG).

Mirrors the published cross-domain tables (category mean accuracy, base -> trained). Rows present in only one file
are kept and shown with '-' so a changed suite is visible rather than silently dropped. The interval of a delta is a
paired bootstrap over the items both runs answered (each item's mean accuracy over its samples, trained minus base):
the same questions for both models, so item difficulty cancels. It resamples questions, each with all its items: a
suite drawn from a small question space asks some questions several times, and a greedy model answers a repeat alike,
so a repeat is not another observation (evaluation.metrics). A change is "resolved" when the interval excludes 0.
Runs scored or sampled differently (reward options, system prompt, temperature, ...) are refused: their accuracies
measure different things.

Beside the overall row, `beyond_prior` pools the tasks that one answer repeated cannot carry: those whose most common
gold answer is right on at most PRIOR_FREE_MAX_SHARE of their items (a property of the suite, fixed before any model
answers). On letter counts "1" is right on 83%: a model that learns to answer "1" gains there without reading a
question, and such a gain is an answer prior, not skill.
"""

from __future__ import annotations

import json
import math
import os

from evaluation.metrics import clustered
from evaluation.report import fmt, load_results
from evaluation.store import atomic_write

PAIRED_RESAMPLES = 2000
PRIOR_FREE_MAX_SHARE = 0.25  # a task is free of a one-answer prior when no single answer is right on more of its items
# run settings that decide what an accuracy means; base and trained must agree on all of them
SCORING_KEYS = ("reward", "system_prompt", "sampling.temperature", "sampling.top_p", "sampling.max_tokens",
                "sampling.n")


class NotComparable(ValueError):
    """Base and trained were scored or sampled differently; the message names each difference and the fix."""


def _setting(run: dict, key: str):
    section, _, name = key.partition(".")
    value = run.get(section)
    return value.get(name) if name and isinstance(value, dict) else value


def check_comparable(base: dict, trained: dict, labels: tuple[str, str]) -> None:
    """Raises NotComparable when the runs differ in any SCORING_KEYS setting."""
    diffs = [f"{key}: {labels[0]} {_setting(base['run'], key)!r} vs {labels[1]} {_setting(trained['run'], key)!r}"
             for key in SCORING_KEYS if _setting(base["run"], key) != _setting(trained["run"], key)]
    if diffs:
        raise NotComparable("refusing to compare: the runs were scored or sampled differently, so their accuracies "
                            "measure different things:\n  " + "\n  ".join(diffs) + "\nevaluate both with the same "
                            "settings (evaluate_model.py --from-run RUN for both, or the same reward.*/sampling.* "
                            "overrides)")


def paired_interval(base: dict[str, float], trained: dict[str, float], items: list[str],
                    resamples: int = PAIRED_RESAMPLES, seed: int = 0,
                    questions: dict[str, str] | None = None) -> tuple[float, float] | None:
    """95% percentile interval of mean(trained - base) over `items`, resampling questions (`questions`: item ->
    question key; an item without one is its own) with all their items; None without items."""
    import numpy as np

    if not items:
        return None
    sums, sizes = clustered([trained[i] - base[i] for i in items],
                            [questions.get(i, i) for i in items] if questions else None)
    sums, sizes = np.array(sums), np.array(sizes)
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(sums), size=(resamples, len(sums)))
    means = sums[pick].sum(axis=1) / sizes[pick].sum(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def verdict(interval: tuple[float, float] | None) -> str:
    """The interval in words."""
    if interval is None:
        return "no paired items"
    if interval[0] > 0:
        return "better (resolved)"
    if interval[1] < 0:
        return "worse (resolved)"
    return "not resolved"


def _acc(stats: dict | None):
    return None if stats is None else stats.get("accuracy")


def _common_answer(*stats: dict | None):
    """The most-common-answer accuracy (evaluation.metrics.common_answer_share): the same items' gold answers in
    both runs; a result written before it existed has none."""
    found = [s.get("common_answer") for s in stats if s and s.get("common_answer") is not None]
    return next((v for v in found if not math.isnan(v)), None)


def _repeated(stats: dict | None):
    """The trained run's repeated-answer share (evaluation.metrics.repeated_answer_share), None when not recorded."""
    value = (stats or {}).get("repeated_answer")
    return None if value is None or math.isnan(value) else value


def _delta(a, b):
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return None
    return b - a


def compare_results(base: dict, trained: dict, labels: tuple[str, str] = ("base", "trained")) -> dict:
    """Rows for every task, every group and overall: accuracy in each run and the delta (trained - base)."""
    check_comparable(base, trained, labels)
    acc_a, acc_b = base.get("item_accuracy") or {}, trained.get("item_accuracy") or {}
    questions = {**(base.get("item_question") or {}), **(trained.get("item_question") or {})}
    common = [i for i in acc_a if i in acc_b]
    apart = {g for run in (base, trained) for g, stats in run["groups"].items() if stats.get("kind") == "benchmark"}
    judged = [i for i in common if i.split("/")[0] not in apart]  # benchmark rows inform, outside the verdict

    def paired(row: dict, members: list[str]) -> dict:
        interval = paired_interval(acc_a, acc_b, members, questions=questions)
        delta = sum(acc_b[i] - acc_a[i] for i in members) / len(members) if members else None
        row.update(paired_items=len(members), paired_questions=len({questions.get(i, i) for i in members}),
                   paired_delta=delta, ci95=list(interval) if interval else None, verdict=verdict(interval))
        return row

    def rows(section: str, member_of) -> list[dict]:
        keys = list(base[section]) + [k for k in trained[section] if k not in base[section]]
        out = []
        for key in keys:
            a, b = _acc(base[section].get(key)), _acc(trained[section].get(key))
            out.append(paired({"key": key, "base": a, "trained": b, "delta": _delta(a, b),
                               "common_answer": _common_answer(trained[section].get(key), base[section].get(key)),
                               "repeated_answer": _repeated(trained[section].get(key))},
                              [i for i in common if member_of(i) == key]))
        return out

    a, b = base["overall"]["accuracy"], trained["overall"]["accuracy"]
    tasks = rows("tasks", lambda i: i.rsplit("/", 1)[0])
    free = {row["key"] for row in tasks if row["common_answer"] is not None
            and row["common_answer"] <= PRIOR_FREE_MAX_SHARE and row["key"].split("/")[0] not in apart}
    members = [i for i in judged if i.rsplit("/", 1)[0] in free]
    item_mean = (lambda acc: sum(acc[i] for i in members) / len(members)) if members else (lambda acc: None)
    beyond = paired({"key": "beyond prior", "base": item_mean(acc_a), "trained": item_mean(acc_b),
                     "tasks": [row["key"] for row in tasks if row["key"] in free],
                     "set_apart": {row["key"]: row["common_answer"] for row in tasks
                                   if row["key"] not in free and row["key"].split("/")[0] not in apart},
                     "max_share": PRIOR_FREE_MAX_SHARE}, members)
    beyond["delta"] = beyond["paired_delta"]
    return {"labels": list(labels), "models": [base["run"]["model"], trained["run"]["model"]],
            "scoring": {key: _setting(base["run"], key) for key in SCORING_KEYS},
            "tasks": tasks, "groups": rows("groups", lambda i: i.split("/")[0]),
            "overall": paired({"key": "overall", "base": a, "trained": b, "delta": _delta(a, b),
                               "common_answer": _common_answer(trained["overall"], base["overall"]),
                               "repeated_answer": _repeated(trained["overall"]), "without": sorted(apart)}, judged),
            "beyond_prior": beyond}


def beyond_prior_text(row: dict) -> str:
    """What the beyond-prior row pools, in words (the rule and the tasks on each side)."""
    apart = ", ".join(f"{key} {share:.0%}" if share is not None else f"{key} (no gold answers)"
                      for key, share in row["set_apart"].items())
    return (f"tasks whose most common gold answer is right on at most {row['max_share']:.0%} of their items, so that "
            f"no answer repeated can carry them: {', '.join(row['tasks']) or 'none in this suite'}"
            + (f"; set apart: {apart}" if apart else ""))


def comparison_markdown(cmp: dict) -> str:
    """Tables of groups, tasks and the beyond-prior pool, with signed deltas."""
    la, lb = cmp["labels"]

    def table(title: str, rows: list[dict]) -> list[str]:
        lines = [f"### {title}", "", f"| {title.lower()} | {la} | {lb} | delta | paired 95% CI | items (questions) "
                 "| change | most common answer | repeated answer |", "|---|---:|---:|---:|---:|---:|---|---:|---:|"]
        for r in rows:
            delta = "-" if r["delta"] is None else f"{r['delta']:+.3f}"
            lines.append(f"| {row_label(r)} | {fmt(r['base'])} | {fmt(r['trained'])} | {delta} | {interval_text(r)} | "
                         f"{r.get('paired_items', '-')} ({r.get('paired_questions', '-')}) | {r.get('verdict', '-')} | "
                         f"{fmt(r.get('common_answer'))} | {fmt(r.get('repeated_answer'))} |")
        return lines + [""]

    head = [f"# {la} vs {lb}", "", f"- {la}: {cmp['models'][0]}", f"- {lb}: {cmp['models'][1]}",
            "- metric: mean accuracy over samples (binarised scores); interval: paired bootstrap over questions, "
            f"{PAIRED_RESAMPLES} resamples", f"- scored and sampled with: {scoring_text(cmp.get('scoring') or {})}",
            "- most common answer: the accuracy of answering every item of a task with that task's most common gold "
            "answer (exact match); repeated answer: the share of the trained model's responses that give its most "
            "frequent answer for the task. Both high: the model may have learned one answer, not the task", ""]
    body = table("Category", cmp["groups"] + [cmp["overall"]]) + table("Task", cmp["tasks"])
    beyond = cmp.get("beyond_prior")
    if beyond:  # a comparison written before the split has none
        body += ["### Beyond an answer prior", "", f"Pooled over the {beyond_prior_text(beyond)}.", "",
                 *table("Pool", [beyond])[2:]]
    return "\n".join(head + body)


def row_label(row: dict) -> str:
    """The row's name; the overall row names the benchmark groups it leaves out (they inform, apart)."""
    return row["key"] + (f" (without {', '.join(row['without'])})" if row.get("without") else "")


def items_text(row: dict) -> str:
    """'400 items of 230 questions', or '400 items' where every item asks its own question."""
    items, questions = row.get("paired_items", 0), row.get("paired_questions")
    return f"{items} items" + (f" of {questions} questions" if questions and questions < items else "")


def interval_text(row: dict) -> str:
    """'[+0.03, +0.13]', or '-' without paired items."""
    ci = row.get("ci95")
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "-"


def scoring_text(scoring: dict) -> str:
    """The scoring settings in one line."""
    reward = scoring.get("reward") or {}
    shown = {k: v for k, v in reward.items() if v not in (False, 0, 0.0, "", None)} or "tags only, binarised"
    return (f"reward {shown}; T={scoring.get('sampling.temperature')}, n={scoring.get('sampling.n')}, "
            f"max_tokens={scoring.get('sampling.max_tokens')}; system prompt {scoring.get('system_prompt')!r}")


def plot_comparison(cmp: dict, path: str) -> None:
    """Grouped bars (base, trained) per category and per task, deltas written above."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = [("categories", cmp["groups"] + [cmp["overall"]]), ("tasks", cmp["tasks"])]
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 0.6 * len(cmp["tasks"]) + 2), 8))
    for ax, (title, rows) in zip(axes, sections):
        xs = range(len(rows))
        base = [r["base"] or 0.0 for r in rows]
        trained = [r["trained"] or 0.0 for r in rows]
        ax.bar([x - 0.2 for x in xs], base, 0.4, label=cmp["labels"][0])
        ax.bar([x + 0.2 for x in xs], trained, 0.4, label=cmp["labels"][1])
        for x, r in zip(xs, rows):
            if r["delta"] is not None:
                ax.text(x, max(base[x], trained[x]) + 0.02, f"{r['delta']:+.2f}", ha="center", fontsize=7)
        ax.set_xticks(list(xs), [r["key"] for r in rows], rotation=45, ha="right", fontsize=7)
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("mean accuracy")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)


def modes(path: str) -> list[str | None]:
    """[None] for a results.json or a folder holding one; else the mode subfolders (greedy, sampled) it holds."""
    if not os.path.isdir(path) or os.path.isfile(os.path.join(path, "results.json")):
        return [None]
    found = [m for m in ("greedy", "sampled") if os.path.isfile(os.path.join(path, m, "results.json"))]
    return found or [None]


def write_comparisons(base_path: str, trained_path: str, out_dir: str,
                      labels: tuple[str, str] = ("base", "trained")) -> dict[str | None, dict]:
    """One comparison per evaluation mode found in both (OUT/greedy, OUT/sampled), or one in OUT; {mode: cmp}."""
    base_modes, trained_modes = modes(base_path), modes(trained_path)
    if base_modes != trained_modes:
        raise NotComparable(f"{base_path} holds {base_modes} evaluations, {trained_path} {trained_modes}; "
                            "evaluate both with the same suite (its 'greedy' key)")
    out = {}
    for mode in base_modes:
        sub = (lambda p: os.path.join(p, mode)) if mode else (lambda p: p)
        out[mode] = write_comparison(sub(base_path), sub(trained_path), sub(out_dir), labels)
    return out


def load_comparisons(out_dir: str) -> dict[str | None, dict]:
    """The comparison.json files write_comparisons left in `out_dir`, by mode."""
    found = {m: os.path.join(out_dir, m, "comparison.json") for m in ("greedy", "sampled")}
    found = {m: p for m, p in found.items() if os.path.isfile(p)} or {None: os.path.join(out_dir, "comparison.json")}
    out = {}
    for mode, path in found.items():
        with open(path) as fh:
            out[mode] = json.load(fh)
    return out


def summary_lines(cmps: dict[str | None, dict]) -> list[str]:
    """A few console lines: per mode, each group and overall, base -> trained, delta, interval, verdict."""
    lines = []
    for mode, cmp in cmps.items():
        sc = cmp.get("scoring") or {}
        label = "greedy (T=0, 1 sample per item)" if sc.get("sampling.temperature") == 0 else \
            f"sampled (T={sc.get('sampling.temperature')}, {sc.get('sampling.n')} samples per item)"
        lines.append(f"{label}: {cmp['labels'][0]} -> {cmp['labels'][1]}, delta, paired 95% interval")
        rows = cmp["groups"] + ([cmp["overall"]] if len(cmp["groups"]) > 1 else [])
        rows += [cmp["beyond_prior"]] if cmp.get("beyond_prior", {}).get("paired_items") else []
        for r in rows:
            delta = "-" if r.get("paired_delta") is None else f"{r['paired_delta']:+.3f}"
            lines.append(f"  {row_label(r):<12} {fmt(r['base'])} -> {fmt(r['trained'])}  {delta} {interval_text(r)}  "
                         f"{r.get('verdict', '-')}")
    return lines


def write_comparison(base_path: str, trained_path: str, out_dir: str,
                     labels: tuple[str, str] = ("base", "trained")) -> dict:
    """comparison.json, comparison.md, comparison.png in `out_dir`; returns the comparison."""
    cmp = compare_results(load_results(base_path), load_results(trained_path), labels)
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, "comparison.json"), json.dumps(cmp, indent=2))
    atomic_write(os.path.join(out_dir, "comparison.md"), comparison_markdown(cmp))
    plot_comparison(cmp, os.path.join(out_dir, "comparison.png"))
    return cmp
