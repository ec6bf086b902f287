"""The answer to "did training help?" where a person looks: one sentence, and one picture beside it.

`verdict_sentence` reads the held-out comparison (evaluation.compare) and says, in one sentence, what the paired
95% interval of the overall change decides; the greedy comparison is the decided one when both decodings ran
(`make quickstart` runs greedy only); under "Not resolved", `unresolved_advice` says what that means (within noise on
these items) and what to try next (the same command with more steps). `plot_summary` draws `summary.png`: the
in-training validation accuracy as a curve (training/report/report.py reads it from the run's validation dumps; a run
without validation, as the CPU quickstart, gets its training accuracy per step) beside each held-out group's base ->
trained accuracy with the paired interval of its change, the verdict (and the advice) as its title.
"""

from __future__ import annotations

from pathlib import Path

from evaluation.compare import interval_text, items_text, verdict
from evaluation.report import fmt
from training.report.report import ALL, RunData, pooled, write_atomic


def decided(cmps: dict[str | None, dict]) -> tuple[str, dict] | None:
    """The comparison whose verdict is the run's: greedy if it ran, else the only (or first) one; None without any."""
    if not cmps:
        return None
    for mode, cmp in cmps.items():
        if (cmp.get("scoring") or {}).get("sampling.temperature") == 0:
            return mode or "greedy", cmp
    mode, cmp = next(iter(cmps.items()))
    return mode or "sampled", cmp


def verdict_sentence(cmps: dict[str | None, dict]) -> str:
    """One sentence: better / worse / not resolved on held-out questions, with the numbers that decide it. What decides
    is the change beyond an answer prior (evaluation.compare's `beyond_prior`: the tasks no answer repeated can carry);
    "Training helped" is said only where that change is resolved better. The overall change is given beside it."""
    chosen = decided(cmps)
    if chosen is None:
        return "No held-out comparison was found, so nothing can be said about what training changed."
    mode, cmp = chosen
    row, beyond = cmp["overall"], cmp.get("beyond_prior")
    overall = _numbers(row, f"held-out {mode} accuracy")
    if not row.get("ci95"):
        return f"No paired items: {overall}."
    if beyond is None or not beyond["tasks"] and all(v is None for v in beyond["set_apart"].values()):
        return _overall_sentence(row, overall)  # written before the split, or no task has gold answers to count
    if not beyond.get("ci95"):
        return (f"Not resolved beyond an answer prior: {overall} ({verdict(row['ci95'])}), but no task of this suite "
                f"has its most common answer right on at most {beyond['max_share']:.0%} of its items, so skill cannot "
                "be told from an answer repeated.")
    pool = _numbers(beyond, f"on the tasks no answer repeated can carry ({', '.join(beyond['tasks'])}), {mode} "
                            "accuracy")
    across = f"{_signed(row.get('paired_delta'))} {interval_text(row)} over all {items_text(row)}"
    if beyond["ci95"][0] > 0:
        return f"Training helped: {pool}, a resolved improvement ({across})."
    if beyond["ci95"][1] < 0:
        return f"Training hurt: {pool}, a resolved decline ({across})."
    if row["ci95"][0] > 0:
        return (f"Not resolved beyond an answer prior: held-out {mode} accuracy rose {across}, but {pool}; that "
                "interval includes zero, so the gain may be answers the model repeats rather than tasks it learned.")
    return (f"Not resolved: {pool}; the interval includes zero ({across}), so this run cannot "
            "tell better from worse.")


def unresolved_advice(cmps: dict[str | None, dict], step: int | None = None) -> str | None:
    """For a "Not resolved" verdict, one sentence on what it means and what to try next: the change that decides (beyond
    the answer prior, else overall) is within noise on these items, which is not evidence that the run failed or that
    it helped; the same command with more steps (twice the run's `step`: training resumes from its last checkpoint)
    may resolve it. None for any other verdict, and where no task of the suite is free of an answer prior (more steps
    would not tell skill from an answer repeated either)."""
    chosen = decided(cmps)
    if chosen is None or not verdict_sentence(cmps).startswith("Not resolved"):
        return None
    cmp = chosen[1]
    beyond = cmp.get("beyond_prior") or {}
    if beyond.get("ci95"):
        row, which = beyond, "the change beyond the answer prior"
    elif beyond and (beyond["tasks"] or any(v is not None for v in beyond["set_apart"].values())):
        return None  # the verdict's "no task of this suite has its most common answer right on at most ..."
    else:  # decided on the overall change, as verdict_sentence does
        row, which = cmp["overall"], "the change"
    more = f"trainer.total_training_steps={2 * step} (training resumes from step {step})" if step else \
        "a larger trainer.total_training_steps (training resumes from its last checkpoint)"
    return (f"Not resolved means {which} ({_signed(row.get('paired_delta'))} {interval_text(row)}) is within noise on "
            f"these {items_text(row)}, not evidence that the run failed or that it helped; to try "
            f"next, run the same command with more steps: {more}.")


def _numbers(row: dict, what: str) -> str:
    return (f"{what} went from {fmt(row['base'])} to {fmt(row['trained'])} over {items_text(row)} "
            f"(paired change {_signed(row.get('paired_delta'))}, 95% interval {interval_text(row)})")


def _overall_sentence(row: dict, numbers: str) -> str:
    ci = row["ci95"]
    if ci[0] > 0:
        return f"Training helped: {numbers}, a resolved improvement."
    if ci[1] < 0:
        return f"Training hurt: {numbers}, a resolved decline."
    return f"Not resolved: {numbers}; the interval includes zero, so this run cannot tell better from worse."


ONE_ANSWER_MIN_SHARE = 0.5  # a task whose most common gold answer is this lopsided can be scored by repeating it
ONE_ANSWER_REPEATED = 0.75  # ... and a trained model that gives one answer to this share of its responses may do so


def one_answer_gains(cmps: dict[str | None, dict]) -> list[str]:
    """Tasks of the decided comparison whose accuracy rose while the trained model gave one answer to most of their
    items (evaluation.metrics.repeated_answer_share >= ONE_ANSWER_REPEATED) and one answer is right on at least half
    of them (common_answer_share >= ONE_ANSWER_MIN_SHARE): such a gain may be one answer repeated rather than the
    task learned (the quickstart at lr 3e-5: "1" to 143 and 128 of 150 letter counts on seeds 1 and 3, where "1" is
    right on 124). One line per task."""
    chosen = decided(cmps)
    if chosen is None:
        return []
    lines = []
    for row in chosen[1]["tasks"]:
        share, repeated = row.get("common_answer"), row.get("repeated_answer")
        base, trained = row.get("base"), row.get("trained")
        if None in (share, repeated, base, trained) or trained <= base:
            continue
        if share >= ONE_ANSWER_MIN_SHARE and repeated >= ONE_ANSWER_REPEATED:
            lines.append(f"{row['key']} went {fmt(base)} -> {fmt(trained)} while the trained model gave one answer "
                         f"to {repeated:.0%} of its items, and that task's most common answer is right on "
                         f"{share:.0%}: the gain may be one answer repeated")
    return lines


def _signed(value) -> str:
    return "-" if value is None else f"{value:+.3f}"


def summary_title(cmps: dict[str | None, dict], step: int | None = None) -> str:
    """summary.png's title: the verdict sentence, and under a "Not resolved" one what it means and what to try next."""
    advice = unresolved_advice(cmps, step)
    return verdict_sentence(cmps) + (f"\n{advice}" if advice else "")


def plot_summary(data: RunData, cmps: dict[str | None, dict], path: Path, step: int | None = None) -> Path:
    """Writes the two-panel PNG at `path` (atomically) and returns it; `step`: the step judged (for the advice)."""
    write_atomic(path, lambda tmp: _draw(data, cmps, tmp, step))
    return path


def _draw(data: RunData, cmps: dict[str | None, dict], path: Path, step: int | None = None) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(13, 5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    heldout, validation = fig.subplots(1, 2)  # the held-out change first: it is what the verdict reads
    _draw_training(validation, data)
    chosen = decided(cmps)
    if chosen is None:
        heldout.text(0.5, 0.5, "no held-out comparison", ha="center", va="center", transform=heldout.transAxes)
        heldout.set_axis_off()
    else:
        _draw_heldout(heldout, *chosen)
    fig.suptitle(summary_title(cmps, step), fontsize=9, wrap=True)
    fig.savefig(path, format="png")


def training_curves(data: RunData) -> tuple[str, str, dict[str, list[tuple[int, float]]]]:
    """(title, y label, {task: [(step, accuracy)]}) of the summary's right panel: the in-training validation where the
    run validated, else the accuracy of the responses each step trained on (the CPU quickstart does not validate: the
    held-out comparison is its before and after); {} when the run wrote neither."""
    if data.validation:
        title, label, per_step = ("in-training validation (sampled as configured)", "validation accuracy",
                                  dict(sorted(data.validation.items())))
    else:
        title, label, per_step = ("training accuracy per step (the responses it trained on)", "training accuracy",
                                  {step: entry["tasks"] for step, entry in sorted(data.steps.items())})
    if len({task for means in per_step.values() for task in means}) > 1:  # pooled, at a step that drew one task too
        per_step = {step: {ALL: pooled(means.values()), **means} for step, means in per_step.items()}
    tasks = list(dict.fromkeys(task for means in per_step.values() for task in means))
    return title, label, {task: [(step, means[task]["accuracy"]) for step, means in per_step.items() if task in means]
                          for task in tasks}


def _draw_training(ax, data: RunData) -> None:
    title, label, curves = training_curves(data)
    if not curves:
        ax.text(0.5, 0.5, "no in-training validation or steps", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    for task, points in curves.items():
        overall = task == ALL or len(curves) == 1
        ax.plot(*zip(*points), marker="o", markersize=4 if len(points) > 5 else 6, linewidth=2.5 if overall else 1,
                alpha=1 if overall else 0.6, color="black" if overall else None, label=task)
    ax.set_xlabel("training step")
    ax.set_ylabel(label)
    ax.set_ylim(0, 1.05)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def heldout_rows(cmp: dict) -> list[dict]:
    """The held-out panel's rows, top to bottom: the pool beyond the answer prior (the row the verdict decides on)
    first, then each group and the overall row."""
    rows = [*cmp["groups"], cmp["overall"]] if len(cmp["groups"]) > 1 else [cmp["overall"]]
    if (cmp.get("beyond_prior") or {}).get("ci95"):
        rows.insert(0, cmp["beyond_prior"])
    return rows


def _draw_heldout(ax, mode: str, cmp: dict) -> None:
    rows = heldout_rows(cmp)
    labels = cmp["labels"]
    for y, row in enumerate(rows):
        base, trained = row["base"] or 0.0, row["trained"] or 0.0
        ax.annotate("", xy=(trained, y), xytext=(base, y), arrowprops={"arrowstyle": "->", "color": "grey"})
        ax.plot([base], [y], "o", color="tab:blue", label=labels[0] if y == 0 else None)
        ax.plot([trained], [y], "o", color="tab:orange", label=labels[1] if y == 0 else None)
        ci = row.get("ci95")
        text = f"{_signed(row.get('paired_delta'))} {interval_text(row)} {row.get('verdict', '')}"
        if ci:  # the change's interval, drawn from the base value
            ax.plot([base + ci[0], base + ci[1]], [y - 0.18, y - 0.18], color="tab:orange", linewidth=3, alpha=0.5)
        ax.text(0.99, y - 0.3, text, ha="right", va="center", fontsize=8, transform=ax.get_yaxis_transform())
    ax.set_yticks(range(len(rows)), [row["key"] for row in rows])
    if rows[0] is cmp.get("beyond_prior"):  # the row the verdict decides on, in bold
        ax.get_yticklabels()[0].set_fontweight("bold")
    ax.set_ylim(len(rows) - 0.5, -0.6)
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"held-out accuracy ({mode}); bar: base + the paired 95% interval of the change")
    ax.set_title(f"held-out: {labels[0]} -> {labels[1]}", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3, axis="x")
