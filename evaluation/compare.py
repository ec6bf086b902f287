"""Base vs trained: per-task and per-group accuracy side by side with deltas (markdown, JSON, PNG).

Mirrors the published cross-domain tables (category mean accuracy, base -> trained). Rows present in only one file
are kept and shown with '-' so a changed suite is visible rather than silently dropped.
"""

from __future__ import annotations

import json
import math
import os

from evaluation.report import fmt, load_results
from evaluation.store import atomic_write


def _acc(stats: dict | None):
    return None if stats is None else stats.get("accuracy")


def _delta(a, b):
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return None
    return b - a


def compare_results(base: dict, trained: dict, labels: tuple[str, str] = ("base", "trained")) -> dict:
    """Rows for every task, every group and overall: accuracy in each run and the delta (trained - base)."""
    def rows(section: str) -> list[dict]:
        keys = list(base[section]) + [k for k in trained[section] if k not in base[section]]
        out = []
        for key in keys:
            a, b = _acc(base[section].get(key)), _acc(trained[section].get(key))
            out.append({"key": key, "base": a, "trained": b, "delta": _delta(a, b)})
        return out

    a, b = base["overall"]["accuracy"], trained["overall"]["accuracy"]
    return {"labels": list(labels), "models": [base["run"]["model"], trained["run"]["model"]],
            "tasks": rows("tasks"), "groups": rows("groups"),
            "overall": {"key": "overall", "base": a, "trained": b, "delta": _delta(a, b)}}


def comparison_markdown(cmp: dict) -> str:
    """Two tables (groups, then tasks) with signed deltas."""
    la, lb = cmp["labels"]

    def table(title: str, rows: list[dict]) -> list[str]:
        lines = [f"### {title}", "", f"| {title.lower()} | {la} | {lb} | delta |", "|---|---:|---:|---:|"]
        for r in rows:
            delta = "-" if r["delta"] is None else f"{r['delta']:+.3f}"
            lines.append(f"| {r['key']} | {fmt(r['base'])} | {fmt(r['trained'])} | {delta} |")
        return lines + [""]

    head = [f"# {la} vs {lb}", "", f"- {la}: {cmp['models'][0]}", f"- {lb}: {cmp['models'][1]}",
            "- metric: mean accuracy over samples (binarised scores)", ""]
    body = table("Category", cmp["groups"] + [cmp["overall"]]) + table("Task", cmp["tasks"])
    return "\n".join(head + body)


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


def write_comparison(base_path: str, trained_path: str, out_dir: str,
                     labels: tuple[str, str] = ("base", "trained")) -> dict:
    """comparison.json, comparison.md, comparison.png in `out_dir`; returns the comparison."""
    cmp = compare_results(load_results(base_path), load_results(trained_path), labels)
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, "comparison.json"), json.dumps(cmp, indent=2))
    atomic_write(os.path.join(out_dir, "comparison.md"), comparison_markdown(cmp))
    plot_comparison(cmp, os.path.join(out_dir, "comparison.png"))
    return cmp
