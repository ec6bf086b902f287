"""Reports of one run: results.json, results.md (markdown table), results.png (bar chart with 95% CIs)."""

from __future__ import annotations

import json
import math
import os

from evaluation.store import atomic_write

RESULTS_JSON, RESULTS_MD, RESULTS_PNG = "results.json", "results.md", "results.png"


def fmt(value, digits: int = 3) -> str:
    """A metric for a table cell ('-' when missing or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _ci(stats: dict) -> str:
    lo, hi = stats.get("accuracy_ci95") or (None, None)
    return f"[{fmt(lo, 2)}, {fmt(hi, 2)}]" if lo is not None else "-"


def markdown_table(results: dict) -> str:
    """One row per task, then one per group (bold) and the overall row, as in the published tables."""
    pass_keys = [f"pass@{k}" for k in results["run"]["pass_k"]]
    head = ["group", "task", "items (questions)", "samples", "accuracy", "95% CI", "mean score", *pass_keys,
            "answer found", "mean tokens"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * 2 + ["---:"] * (len(head) - 2)) + "|"]

    def row(group: str, task: str, st: dict) -> str:
        items = f"{st['n_items']} ({st['n_questions']})" if "n_questions" in st else str(st["n_items"])
        cells = [group, task, items, str(st["n_samples"]), fmt(st["accuracy"]), _ci(st),
                 fmt(st["mean_score"]), *[fmt(st.get(k)) for k in pass_keys], fmt(st["answer_found"], 2),
                 fmt(st["mean_response_tokens"], 1)]
        return "| " + " | ".join(cells) + " |"

    for group, gst in results["groups"].items():
        for key, st in results["tasks"].items():
            if st["group"] == group:
                lines.append(row(group, st["task"], st))
        lines.append(row(f"**{group}**", f"**{gst['kind']} mean**", gst))
    apart = [g for g, gst in results["groups"].items() if gst["kind"] == "benchmark"]
    lines.append(row("**overall**", f"without {', '.join(apart)}" if apart else "", results["overall"]))
    run = results["run"]
    rate = f"{run['samples_per_s']} samples/s" if run.get("samples_per_s") else "nothing generated in this run"
    title = (f"# Evaluation: {run['model']}\n\nconfig `{run['config']}`, backend {run['backend']}, "
             f"{run['sampling']['n']} samples/item, T={run['sampling']['temperature']}, "
             f"top_p={run['sampling']['top_p']}, max_tokens={run['sampling']['max_tokens']}; {rate}"
             + ("" if run.get("complete", True) else "; INCOMPLETE (rerun to finish)") + "\n\n")
    return title + "\n".join(lines) + "\n"


def plot_results(results: dict, path: str) -> None:
    """Horizontal bars of per-task accuracy with 95% CIs, coloured by group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(results["tasks"].values())
    groups = list(results["groups"])
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * max(1, len(tasks))))
    labels = [f"{t['group']}/{t['task']}" for t in tasks]
    acc = [t["accuracy"] for t in tasks]
    err = [[max(0.0, a - (t["accuracy_ci95"][0] if not math.isnan(t["accuracy_ci95"][0]) else a)) for a, t in zip(acc, tasks)],
           [max(0.0, (t["accuracy_ci95"][1] if not math.isnan(t["accuracy_ci95"][1]) else a) - a) for a, t in zip(acc, tasks)]]
    ax.barh(range(len(tasks)), acc, xerr=err, capsize=2,
            color=[colors[groups.index(t["group"]) % len(colors)] for t in tasks])
    ax.set_yticks(range(len(tasks)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("mean accuracy over samples (95% bootstrap CI over questions)")
    ax.set_title(f"{results['run']['model']}: overall {results['overall']['accuracy']:.3f}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)


def write_reports(results: dict, out_dir: str) -> None:
    """results.json, results.md and results.png in `out_dir` (each written atomically)."""
    atomic_write(os.path.join(out_dir, RESULTS_JSON), json.dumps(results, indent=2, sort_keys=False))
    atomic_write(os.path.join(out_dir, RESULTS_MD), markdown_table(results))
    if results["tasks"]:
        plot_results(results, os.path.join(out_dir, RESULTS_PNG))


def load_results(path: str) -> dict:
    """A results.json, or the folder holding one (the question of each item read from its generations.jsonl when
    the results predate `item_question`)."""
    if os.path.isdir(path):
        path = os.path.join(path, RESULTS_JSON)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no results.json (run evaluation/evaluate_model.py first)")
    with open(path) as fh:
        results = json.load(fh)
    generations = os.path.join(os.path.dirname(path), "generations.jsonl")
    if "item_question" not in results and os.path.isfile(generations):  # written before results kept the questions
        from evaluation.metrics import item_questions

        with open(generations) as fh:
            results["item_question"] = item_questions([json.loads(line) for line in fh if line.strip()])
    return results
