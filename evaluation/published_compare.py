"""Where an evaluated model stands among Reasoning Gym's published models: the same items, the same scorer.

The published completions were rescored once by this project's reward (evaluation/published_scores.py, committed as
evaluation/data/rg_zero_shot_published.json.gz); a run of configs/eval/rg_zero_shot_{easy,hard}.yaml is scored by the
same reward, so a paired difference per item compares models, not scorers. Each of the run's items is matched to the
published item at its place by question hash; an item whose question is not the published one (a changed seed, size
or parameter) is left out and counted, and a run scored with other reward options is refused.

Items are split by who could have drawn them: this project's train split owns 75% of question texts
(envs.splits.question_owner), so a model trained here may have seen those. The rest, `unseen`, is the headline for such
a model (`--trained-here`); `all` is the headline otherwise. Intervals: the paired bootstrap of evaluation.compare
(evaluated minus published), per category and overall, resampling questions (items that ask one question count once).
"""

from __future__ import annotations

import json
import os

from evaluation.compare import PAIRED_RESAMPLES, interval_text, paired_interval, verdict
from evaluation.metrics import bootstrap_ci
from evaluation.report import fmt
from evaluation.store import atomic_write

SUBSETS = ("all", "unseen")
SUBSET_TEXT = {"all": "all matched items",
               "unseen": "items whose question this project's train split does not own (a model trained here cannot "
                         "have drawn them)"}
OUTPUT = "published"  # OUT/published.{json,md,png}


class NotComparable(ValueError):
    """The run cannot be set beside the published table; the message says why and what to run."""


def display_name(model: str) -> str:
    """'openai_o3-mini' -> 'o3-mini' (the eval repository's folders are <provider>_<model>)."""
    return model.split("_", 1)[-1]


def read_questions(out_dir: str) -> dict[str, str]:
    """{item_id: question} from a run's generations.jsonl."""
    from evaluation.runner import GENERATIONS

    questions = {}
    with open(os.path.join(out_dir, GENERATIONS)) as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                questions[record["item_id"]] = record["question"]
    return questions


def match_items(data: dict, questions: dict[str, str]) -> tuple[str, dict[str, tuple[str, int]], int]:
    """The published set the run's items belong to (the one most of them match; five tasks draw the same questions in
    both, and a run of only those is set beside the easy set), {item_id: (task key, position)} of the items whose
    question is the published one at that place, and how many items were not."""
    from evaluation.published_scores import question_hash

    def matches(hashes: dict) -> dict[str, tuple[str, int]]:
        out = {}
        for item_id, question in questions.items():
            key, position = item_id.rsplit("/", 1)
            published = hashes.get(key) or []
            if int(position) < len(published) and published[int(position)] == question_hash(question):
                out[item_id] = (key, int(position))
        return out

    found = {name: matches(entry["hashes"]) for name, entry in data["sets"].items()}
    name = max(found, key=lambda n: len(found[n]))
    if not found[name]:
        raise NotComparable("none of this run's questions is one of Reasoning Gym's published items: evaluate with "
                            "configs/eval/rg_zero_shot_easy.yaml or rg_zero_shot_hard.yaml, their suite unchanged "
                            "(suite.items: published, seed 45, size 50, the tasks' parameters)")
    return name, found[name], len(questions) - len(found[name])


def scoring_differences(reward: dict, data: dict) -> list[str]:
    """The reward options in which a run differs from the published rescoring (data['scoring'])."""
    reward = json.loads(json.dumps(reward))  # as results.json holds them: tuples are lists
    return [f"reward.{key}: this run {reward.get(key)!r}, the published rescoring {value!r}"
            for key, value in data["scoring"].items() if reward.get(key) != value]


def refusal(diffs: list[str]) -> str:
    return ("the published completions were rescored with other reward options, so the accuracies would measure "
            "different things:\n  " + "\n  ".join(diffs) + "\nevaluate with the suite's own reward settings (no "
            "--from-run, no reward.* overrides)")


def check_config(cfg) -> None:
    """Before any model loads: --compare-published needs a published suite scored as the published table was."""
    from evaluation.config import ConfigError
    from evaluation.published_scores import load
    from evaluation.runner import scoring_options

    if cfg.items != "published":
        raise ConfigError(f"{cfg.source}: --compare-published needs Reasoning Gym's published items (suite.items: "
                          "published); use configs/eval/rg_zero_shot_easy.yaml or rg_zero_shot_hard.yaml")
    diffs = scoring_differences(scoring_options(cfg), load())
    if diffs:
        raise ConfigError(f"{cfg.source}: --compare-published: {refusal(diffs)}")


def _mean(values: list[float]):
    return sum(values) / len(values) if values else None


def group_row(key: str, members: list[str], evaluated: dict[str, float], published: dict[str, dict[str, float]],
              questions: dict[str, str]) -> dict:
    """The evaluated model on `members`, and against each published model on the members it answered too; intervals
    resample `questions` (item -> question text)."""
    lo_hi = bootstrap_ci([evaluated[i] for i in members], PAIRED_RESAMPLES,
                         clusters=[questions.get(i, i) for i in members]) if members else None
    rows = []
    for model, accuracy in published.items():
        paired = [i for i in members if accuracy.get(i) is not None]
        interval = paired_interval(accuracy, evaluated, paired, questions=questions)
        rows.append({"model": model, "items": len(paired), "published": _mean([accuracy[i] for i in paired]),
                     "evaluated": _mean([evaluated[i] for i in paired]),
                     "delta": _mean([evaluated[i] - accuracy[i] for i in paired]),
                     "ci95": list(interval) if interval else None, "verdict": verdict(interval)})
    rows.sort(key=lambda r: -1.0 if r["published"] is None else r["published"], reverse=True)
    above = sum(1 for r in rows if r["delta"] is not None and r["delta"] < 0)
    return {"key": key, "items": len(members), "accuracy": _mean([evaluated[i] for i in members]),
            "ci95": list(lo_hi) if lo_hi else None, "rank": above + 1, "of": len(rows) + 1, "models": rows}


def subset_items(questions: dict[str, str], ids=None) -> dict[str, list[str]]:
    """{subset: sorted item ids} of `ids` (default: every item of `questions`): all of them, and the unseen ones
    (whose question this project's train split does not own)."""
    from envs.splits import question_owner

    ids = sorted(questions if ids is None else ids)
    return {"all": ids, "unseen": [i for i in ids if question_owner(questions[i]) != "train"]}


def compare_published(results: dict, questions: dict[str, str], data: dict, trained_here: bool = False) -> dict:
    """The comparison: per subset (all, unseen), per category and overall, the evaluated model beside every
    published model of the matched set."""
    diffs = scoring_differences(results["run"]["reward"], data)
    if diffs:
        raise NotComparable(f"refusing to compare: {refusal(diffs)}")
    name, matched, not_published = match_items(data, questions)
    evaluated = {i: results["item_accuracy"][i] for i in matched if i in results["item_accuracy"]}
    published = {model: {i: tasks[key]["accuracy"][pos] for i, (key, pos) in matched.items() if key in tasks}
                 for model, tasks in data["sets"][name]["models"].items()}
    out = {}
    for subset, members in subset_items(questions, evaluated).items():
        categories = sorted({i.split("/", 1)[0] for i in members})
        out[subset] = {"items": len(members),
                       "categories": [group_row(c, [i for i in members if i.split("/", 1)[0] == c], evaluated,
                                                published, questions) for c in categories],
                       "overall": group_row("overall", members, evaluated, published, questions)}
    unanswered: dict[str, int] = {}  # items at which this Reasoning Gym draws another question than was published
    for i in evaluated:
        if all(accuracy.get(i) is None for accuracy in published.values()):
            unanswered[i.rsplit("/", 1)[0]] = unanswered.get(i.rsplit("/", 1)[0], 0) + 1
    run = results["run"]
    return {"set": name, "model": run["model"], "headline": "unseen" if trained_here else "all",
            "matched_items": len(evaluated), "not_published": not_published, "no_published_answer": unanswered,
            "sampling": run["sampling"], "scoring": data["scoring"], "about": data["about"],
            "reasoning_gym": data["reasoning_gym"], "subsets": out}


def standing(row: dict) -> str:
    """'3rd of 11 (below o3-mini 0.803, DeepSeek 0.716; above ...)' in short: its rank and its neighbours."""
    models = [r for r in row["models"] if r["delta"] is not None]
    above = [r for r in models if r["delta"] < 0]
    below = [r for r in models if r["delta"] >= 0]
    near = ([f"below {display_name(above[-1]['model'])} {fmt(above[-1]['published'])}"] if above else []) + \
           ([f"above {display_name(below[0]['model'])} {fmt(below[0]['published'])}"] if below else [])
    return f"{row['rank']} of {row['of']}" + (f" ({', '.join(near)})" if near else "")


def unanswered_text(cmp: dict) -> str:
    return ", ".join(f"{key} {count}" for key, count in sorted(cmp["no_published_answer"].items()))


def summary_lines(cmp: dict) -> list[str]:
    """The console's few lines: the headline subset, overall against each published model, then each category."""
    sub = cmp["subsets"][cmp["headline"]]
    overall = sub["overall"]
    lines = [f"beside Reasoning Gym's published models ({cmp['set']} set, {SUBSET_TEXT[cmp['headline']]}: "
             f"{sub['items']} items; evaluated minus published, paired 95% interval):",
             f"  overall {fmt(overall['accuracy'])} {interval_text(overall)}: {standing(overall)}"]
    for r in overall["models"]:
        lines.append(f"    vs {display_name(r['model']):<32} {fmt(r['published'])}  "
                     f"{'-' if r['delta'] is None else format(r['delta'], '+.3f')} {interval_text(r)}  {r['verdict']}")
    for row in sub["categories"]:
        lines.append(f"  {row['key']:<12} {fmt(row['accuracy'])} {interval_text(row)} ({row['items']} items): "
                     f"{standing(row)}")
    if cmp["no_published_answer"]:
        lines.append(f"  items with no published answer (another question is drawn there now): {unanswered_text(cmp)}")
    return lines


def comparison_markdown(cmp: dict) -> str:
    """Per subset (headline first): overall against each published model, then categories x models."""
    sampling = cmp["sampling"]
    lines = [f"# Beside Reasoning Gym's published models ({cmp['set']} set)", "",
             f"- evaluated: {cmp['model']}, T={sampling['temperature']}, top_p={sampling['top_p']}, "
             f"max_tokens={sampling['max_tokens']}, n={sampling['n']}",
             f"- published: {cmp['about']}; rescored with Reasoning Gym {cmp['reasoning_gym']}",
             f"- items: {cmp['matched_items']} of this run's items are published ones"
             + (f"; {cmp['not_published']} are not (their question differs) and are left out"
                if cmp["not_published"] else ""),
             *([f"- no published answer (this Reasoning Gym draws another question there than the published runs "
                f"asked; unpaired): {unanswered_text(cmp)}"] if cmp.get("no_published_answer") else []),
             "- metric: mean accuracy over an item's samples; delta: evaluated minus published on the items both "
             f"answered; interval: paired bootstrap over questions, {PAIRED_RESAMPLES} resamples", ""]
    order = [cmp["headline"]] + [s for s in SUBSETS if s != cmp["headline"]]
    for subset in order:
        sub = cmp["subsets"][subset]
        rows = sub["categories"] + [sub["overall"]]
        models = [r["model"] for r in sub["overall"]["models"]]
        lines += [f"## {subset}{' (headline)' if subset == cmp['headline'] else ''}: {SUBSET_TEXT[subset]}, "
                  f"{sub['items']} items", "", "| published model | items | its accuracy | evaluated | delta | "
                  "paired 95% CI | change |", "|---|---:|---:|---:|---:|---:|---|"]
        for r in sub["overall"]["models"]:
            lines.append(f"| {display_name(r['model'])} | {r['items']} | {fmt(r['published'])} | {fmt(r['evaluated'])} "
                         f"| {'-' if r['delta'] is None else format(r['delta'], '+.3f')} | {interval_text(r)} | "
                         f"{r['verdict']} |")
        lines += ["", "| category | items | evaluated | 95% CI | rank | " + " | ".join(map(display_name, models))
                  + " |", "|---|---:|---:|---:|---:|" + "---:|" * len(models)]
        for row in rows:
            by_model = {r["model"]: r for r in row["models"]}
            cells = [f"{fmt(by_model[m]['published'])} {interval_text(by_model[m])}" for m in models]
            lines.append(f"| {row['key']} | {row['items']} | {fmt(row['accuracy'])} | {interval_text(row)} | "
                         f"{row['rank']} of {row['of']} | " + " | ".join(cells) + " |")
        lines += ["", "(each published cell: its accuracy, then the paired interval of evaluated minus it)", ""]
    return "\n".join(lines)


def plot_published(cmps: list[dict], path: str, labels: list[str] | None = None) -> None:
    """Per category and overall (the headline subset): each published model a marker, each evaluated model a star
    with its 95% interval (several: the same items, e.g. a base model and its trained export)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    subs = [cmp["subsets"][cmp["headline"]] for cmp in cmps]
    rows = subs[0]["categories"] + [subs[0]["overall"]]
    models = [r["model"] for r in subs[0]["overall"]["models"]]
    fig, ax = plt.subplots(figsize=(max(7, 0.8 * len(rows) + 3), 4.8))
    markers = "osD^v<>ph8P"
    for k, model in enumerate(models):
        ys = [next(r["published"] for r in row["models"] if r["model"] == model) for row in rows]
        xs = [x + (k - len(models) / 2) * 0.03 for x in range(len(rows))]
        ax.scatter(xs, [float("nan") if y is None else y for y in ys], marker=markers[k % len(markers)], s=22,
                   alpha=0.8, label=display_name(model))
    labels = labels or [os.path.basename(cmp["model"].rstrip("/")) or cmp["model"] for cmp in cmps]
    for k, (sub, label) in enumerate(zip(subs, labels)):
        own = {row["key"]: row for row in sub["categories"] + [sub["overall"]]}
        mine = [own.get(row["key"]) for row in rows]
        acc = [float("nan") if r is None or r["accuracy"] is None else r["accuracy"] for r in mine]
        err = [[0.0 if r is None or not r["ci95"] else a - r["ci95"][0] for a, r in zip(acc, mine)],
               [0.0 if r is None or not r["ci95"] else r["ci95"][1] - a for a, r in zip(acc, mine)]]
        xs = [x + 0.25 + 0.12 * k for x in range(len(rows))]
        ax.errorbar(xs, acc, yerr=err, fmt="*", color=("black", "crimson", "navy", "darkgreen")[k % 4],
                    markersize=12, capsize=3, label=f"{label} (95% CI)", zorder=5)
    ax.set_xticks(range(len(rows)), [f"{r['key']}\n({r['items']})" for r in rows], rotation=45, ha="right", fontsize=8)
    ax.set_ylim(-0.03, 1.03)
    ax.set_ylabel("mean accuracy")
    ax.set_title(f"Reasoning Gym {cmps[0]['set']} set, {cmps[0]['headline']} items, all rescored by this project's "
                 "reward", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path + ".tmp.png", dpi=110)
    plt.close(fig)
    os.replace(path + ".tmp.png", path)


def write_published_comparison(out_dir: str, trained_here: bool = False, data: dict | None = None) -> dict:
    """OUT/published.json, .md and .png for the evaluation in `out_dir`, its tables appended to the run's
    results.md (which each evaluation writes anew); returns the comparison."""
    from evaluation.published_scores import load
    from evaluation.report import RESULTS_MD, load_results

    cmp = compare_published(load_results(out_dir), read_questions(out_dir), data or load(), trained_here)
    markdown = comparison_markdown(cmp)
    atomic_write(os.path.join(out_dir, f"{OUTPUT}.json"), json.dumps(cmp, indent=2))
    atomic_write(os.path.join(out_dir, f"{OUTPUT}.md"), markdown)
    with open(os.path.join(out_dir, RESULTS_MD)) as fh:
        atomic_write(os.path.join(out_dir, RESULTS_MD), fh.read() + "\n" + markdown)
    plot_published([cmp], os.path.join(out_dir, f"{OUTPUT}.png"))
    return cmp
