"""A training run's summary from the files it wrote: a per-step table, validation before vs after, and curves.

    python -m training.report checkpoints/rg-grpo/quickstart     # prints the table, writes report.md and report.png

Reads, in the run folder (`trainer.default_local_dir`):
- `generations/train/steps.jsonl` (training/trainer/generations.py): per step and task the mean reward, accuracy and answer
  rate over all of the step's responses, and the step's share of zero-variance groups (no GRPO signal);
- `generations/val/<step>.jsonl`, verl's validation dumps with our reward fields (`trainer.validation_data_dir`):
  every validation response's task, score, acc and answer_found. Before = the lowest validation step, after = the
  highest;
- `latest_checkpointed_iteration.txt`: the last checkpoint's step.
Writes `report.md` (the table) and `report.png` (the curves) beside them, each whole (temporary file, then rename).
A running run can be read too: a half-written last line is skipped. What is missing is said in the table.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Iterable

from utils.generation_viewer import read_jsonl

METRICS = ("reward", "accuracy", "answer_rate", "truncated")  # truncated: absent from runs before it was recorded
MAX_STEP_ROWS = 30  # longer runs show the per-step table in blocks of steps (the PNG keeps every step)
ALL = "all"


@dataclass
class RunData:
    """What a run folder holds, as means per task: {task: {"reward", "accuracy", "answer_rate", "samples"}}."""

    run_dir: Path
    steps: dict[int, dict] = field(default_factory=dict)  # step -> {"tasks": {task: means}, "zero_variance_groups"}
    validation: dict[int, dict] = field(default_factory=dict)  # step -> {task: means}
    checkpoint: int | None = None  # step of the latest checkpoint
    notes: list[str] = field(default_factory=list)  # what is missing, in words


@dataclass(frozen=True)
class Report:
    """The rendered table and where the files went (png None when it could not be drawn)."""

    text: str
    markdown: Path
    png: Path | None
    summary: str = ""  # the text without the per-step table (the console printed a line per step already)


# ----- reading -----
def read_steps(path: Path) -> dict[int, dict]:
    """Returns {step: {"tasks", "zero_variance_groups" (None in files written before it was recorded)}} of a
    steps.jsonl; the last line of a step wins (a resumed run may take a step again)."""
    steps = {}
    for line in read_jsonl(path):
        if isinstance(line.get("step"), int) and isinstance(line.get("tasks"), dict):
            steps[line["step"]] = {"tasks": line["tasks"], "zero_variance_groups": line.get("zero_variance_groups")}
    return dict(sorted(steps.items()))


def read_validation(directory: Path) -> dict[int, dict]:
    """Returns {step: {task: means}} from verl's validation dumps `<step>.jsonl` (rows: task, score, acc,
    answer_found)."""
    validation = {}
    for path in directory.glob("*.jsonl"):
        if not path.stem.isdigit():
            continue
        by_task: dict[str, list[tuple[float, float, float]]] = {}
        for row in read_jsonl(path):
            if row.get("score") is not None:
                values = tuple(float(row.get(key) or 0.0) for key in ("score", "acc", "answer_found"))
                by_task.setdefault(str(row.get("task") or "unknown"), []).append(values)
        if by_task:
            validation[int(path.stem)] = {task: {**dict(zip(METRICS, map(fmean, zip(*values)))), "samples": len(values)}
                                          for task, values in sorted(by_task.items())}
    return dict(sorted(validation.items()))


def load_run(run_dir: str | os.PathLike, train_dir: str | os.PathLike | None = None,
             val_dir: str | os.PathLike | None = None) -> RunData:
    """Reads a run folder; `train_dir` (env.dump.dir) and `val_dir` (trainer.validation_data_dir) default to
    `<run>/generations/train` and `<run>/generations/val`."""
    run = Path(run_dir)
    train = Path(train_dir) if train_dir else run / "generations" / "train"
    val = Path(val_dir) if val_dir else run / "generations" / "val"
    data = RunData(run_dir=run)
    summary = train / "steps.jsonl"
    data.steps = read_steps(summary) if summary.is_file() else {}
    if not data.steps:
        data.notes.append(f"no per-step summaries in {summary} (env.dump.every_steps=0, or no step has finished)")
    data.validation = read_validation(val) if val.is_dir() else {}
    if not data.validation:
        data.notes.append(f"no validation dumps in {val} (trainer.validation_data_dir unset, or no validation ran: "
                          "trainer.val_before_train / trainer.test_freq)")
    elif len(data.validation) == 1:
        data.notes.append(f"one validation only (step {next(iter(data.validation))}): no before/after to compare")
    latest = run / "latest_checkpointed_iteration.txt"
    if latest.is_file() and latest.read_text().strip().isdigit():
        data.checkpoint = int(latest.read_text().strip())
    return data


# ----- summarising -----
def pooled(means: Iterable[dict]) -> dict:
    """Returns the sample-weighted means of several {reward, accuracy, answer_rate, samples} dicts."""
    means = [m for m in means if m and m.get("samples")]
    samples = sum(int(m["samples"]) for m in means)
    if not samples:
        return {}
    pooled_means = {key: sum(float(m[key]) * int(m["samples"]) for m in means) / samples for key in METRICS
                    if all(key in m for m in means)}
    return {**pooled_means, "samples": samples}


def with_all(tasks: dict[str, dict]) -> dict[str, dict]:
    """Returns {"all": pooled over tasks, task: means, ...} ("all" only for two tasks or more)."""
    return {ALL: pooled(tasks.values()), **tasks} if len(tasks) > 1 else dict(tasks)


def pooled_steps(steps: dict[int, dict], chosen: Iterable[int]) -> dict[str, dict]:
    """Returns {task: means} pooled over the chosen steps' responses."""
    by_task: dict[str, list[dict]] = {}
    for step in chosen:
        for task, means in steps[step]["tasks"].items():
            by_task.setdefault(task, []).append(means)
    return {task: pooled(values) for task, values in sorted(by_task.items())}


def step_blocks(steps: dict[int, dict], max_rows: int = MAX_STEP_ROWS) -> list[tuple[str, list[int]]]:
    """Returns (label, steps) rows of the per-step table: one per step, or blocks of steps past `max_rows`."""
    numbers = list(steps)
    size = max(1, math.ceil(len(numbers) / max_rows))
    blocks = [numbers[i:i + size] for i in range(0, len(numbers), size)]
    return [(str(b[0]) if len(b) == 1 else f"{b[0]}-{b[-1]}", b) for b in blocks]


def zero_variance_share(steps: dict[int, dict], chosen: Iterable[int]) -> float | None:
    """Returns the mean zero-variance share of the chosen steps (None where steps.jsonl does not record it)."""
    shares = [steps[s]["zero_variance_groups"] for s in chosen if steps[s]["zero_variance_groups"] is not None]
    return fmean(shares) if shares else None


def trend_window(steps: dict[int, dict]) -> tuple[list[int], list[int]]:
    """Returns (the first k steps, the last k steps), k = a quarter of the run (at least 1)."""
    numbers = list(steps)
    k = max(1, len(numbers) // 4)
    return numbers[:k], numbers[-k:]


# ----- the table -----
def _num(value, digits: int = 3) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"


def _change(before: dict | None, after: dict | None, key: str) -> str:
    return f"{_num((before or {}).get(key))} -> {_num((after or {}).get(key))}"


def markdown_table(header: list[str], rows: list[list[str]], text_columns: int = 1) -> str:
    """Returns a markdown table with padded columns: the first `text_columns` left-aligned, numbers right-aligned."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]

    def line(cells) -> str:
        return "| " + " | ".join(str(c).ljust(w) if i < text_columns else str(c).rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths))) + " |"

    rule = "|" + "|".join("-" * (w + 2) if i < text_columns else "-" * (w + 1) + ":" for i, w in enumerate(widths))
    return "\n".join([line(header), rule + "|", *(line(r) for r in rows)])


def _span(steps: list[int]) -> str:
    return f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"


def steps_section(data: RunData) -> list[str]:
    """The per-step table: an `all` row per step (with the zero-variance share), then its tasks."""
    if not data.steps:
        return []
    rows = []
    for label, block in step_blocks(data.steps):
        flat = _num(zero_variance_share(data.steps, block), 2)
        for n, (task, means) in enumerate(with_all(pooled_steps(data.steps, block)).items()):
            rows.append([label if n == 0 else "", task, *(_num(means.get(k)) for k in METRICS),
                         str(means.get("samples", 0)), flat if n == 0 else ""])
    blocks = "" if len(step_blocks(data.steps)) == len(data.steps) else f" (in blocks, {MAX_STEP_ROWS} rows at most)"
    header = ["step", "task", "reward", "accuracy", "answer rate", "cut", "samples", "zero-var"]
    return [f"## Training, per step{blocks}", "", markdown_table(header, rows, text_columns=2),
            "", "Means over all of a step's responses. cut: the share of responses cut at data.max_response_length",
            "(how they are scored: env.reward.truncated). zero-var: the share of the step's groups whose responses",
            "all scored the same (no GRPO signal).", ""]


def comparison_section(title: str, before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """A before -> after table per task (and all) of accuracy, reward and answer rate."""
    before, after = with_all(before), with_all(after)
    tasks = list(dict.fromkeys([*after, *before]))
    rows = [[task, str((after.get(task) or before.get(task) or {}).get("samples", 0)),
             *(_change(before.get(task), after.get(task), key) for key in ("accuracy", "reward", "answer_rate"))]
            for task in tasks]
    return [title, "", markdown_table(["task", "samples", "accuracy", "reward", "answer rate"], rows), ""]


def render(data: RunData, per_step: bool = True) -> str:
    """Returns the report as markdown text (it reads as plain text in a terminal); per_step=False leaves out the
    per-step table."""
    steps = list(data.steps)
    lines = [f"# Training report: {data.run_dir}", ""]
    lines.append(f"- training steps: {len(steps)}" + (f" ({steps[0]}-{steps[-1]})" if steps else ""))
    lines.append(f"- validation at steps: {', '.join(map(str, data.validation)) or 'none'}")
    lines.append(f"- checkpoint: {data.run_dir / f'global_step_{data.checkpoint}'}" if data.checkpoint is not None
                 else "- checkpoint: none written")
    lines += [f"- missing: {note}" for note in data.notes] + [""]
    lines += steps_section(data) if per_step else []
    if len(data.validation) >= 2:
        first, last = min(data.validation), max(data.validation)
        lines += comparison_section(f"## Validation: step {first} (before) -> step {last} (after)",
                                    data.validation[first], data.validation[last])
    elif data.validation:
        (only, tasks), = data.validation.items()
        lines += comparison_section(f"## Validation at step {only} (the only one)", {}, tasks)
    if len(steps) >= 2:
        first, last = trend_window(data.steps)
        lines += comparison_section(f"## Training: {_span(first)} -> {_span(last)} (means over their responses)",
                                    pooled_steps(data.steps, first), pooled_steps(data.steps, last))
    elif steps:
        lines += ["One training step: no trend to compare.", ""]
    return "\n".join(lines).rstrip() + "\n"


# ----- the curves -----
def task_colors(data: RunData) -> dict[str, object]:
    """Returns a colour per task (training and validation tasks, sorted), black for `all`."""
    from matplotlib import colormaps

    tasks = sorted({task for step in data.steps.values() for task in step["tasks"]}
                   | {task for tasks in data.validation.values() for task in tasks})
    palette = colormaps["tab10" if len(tasks) <= 10 else "tab20"]
    return {ALL: "black", **{task: palette(i % palette.N) for i, task in enumerate(tasks)}}


def _empty(ax, message: str) -> None:
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_curves(ax, data: RunData, key: str, colors: dict) -> None:
    """One metric per step and task (lines; `all` thick) with every validation as diamonds."""
    from matplotlib.lines import Line2D

    steps = list(data.steps)
    per_step = {step: with_all(data.steps[step]["tasks"]) for step in steps}
    marker = "o" if len(steps) <= 40 else None
    for task in [t for t in colors if any(t in row for row in per_step.values())]:
        xs = [s for s in steps if per_step[s].get(task)]
        ax.plot(xs, [per_step[s][task][key] for s in xs], color=colors[task], marker=marker, markersize=3,
                linewidth=2.2 if task == ALL else 1.2, label=task, zorder=3 if task == ALL else 2)
    for step, tasks in data.validation.items():
        for task, means in with_all(tasks).items():
            ax.scatter([step], [means[key]], marker="D", s=46, zorder=4, linewidths=1.4, edgecolors=colors[task],
                       facecolors=colors[task] if task == ALL else "none")
    handles, _ = ax.get_legend_handles_labels()
    if data.validation:
        handles.append(Line2D([], [], marker="D", linestyle="none", markerfacecolor="none", markeredgecolor="0.3",
                              label="validation"))
    ax.legend(handles=handles, fontsize=7, ncol=2 if len(handles) > 6 else 1, loc="best")
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, -0.03), max(high, 1.03))  # rewards and accuracies on one scale from 0 to 1 at least
    ax.set_title(f"{key.replace('_', ' ')} per step (lines: training, diamonds: validation)", fontsize=10)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)


def plot_signal(ax, data: RunData) -> None:
    """Zero-variance share per step (bars) and the answer rate over all tasks (line)."""
    steps = list(data.steps)
    flat = [s for s in steps if data.steps[s]["zero_variance_groups"] is not None]
    if flat:
        ax.bar(flat, [data.steps[s]["zero_variance_groups"] for s in flat], color="0.75",
               label="zero-variance groups (no signal)")
    answer_rate = [pooled(data.steps[s]["tasks"].values()).get("answer_rate", 0.0) for s in steps]
    ax.plot(steps, answer_rate, color="tab:green", marker="o" if len(steps) <= 40 else None, markersize=3,
            label="answer rate (all tasks)")
    ax.set_ylim(0, 1.05)
    ax.set_title("GRPO signal and answer rate per step", fontsize=10)
    ax.set_xlabel("step")
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3)


def plot_validation(ax, data: RunData, colors: dict) -> None:
    """Validation accuracy per task: the first validation (light) next to the last (solid)."""
    first, last = min(data.validation), max(data.validation)
    before, after = with_all(data.validation[first]), with_all(data.validation[last])
    tasks = list(dict.fromkeys([*after, *before]))
    pairs = [(first, before, -0.2, 0.35), (last, after, 0.2, 1.0)] if last != first else [(first, before, 0.0, 1.0)]
    for step, values, offset, alpha in pairs:
        xs = [i + offset for i, t in enumerate(tasks) if t in values]
        heights = [values[t]["accuracy"] for t in tasks if t in values]
        bars = ax.bar(xs, heights, width=0.38, color=[colors[t] for t in tasks if t in values], alpha=alpha,
                      edgecolor="black", linewidth=0.5, label=f"step {step}")
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1.1)
    ax.set_title(f"validation accuracy: step {first} (light) -> step {last} (solid)" if last != first
                 else f"validation accuracy at step {first}", fontsize=10)
    ax.grid(alpha=0.3, axis="y")


def plot(data: RunData, path: Path) -> None:
    """Draws the 2x2 summary figure (reward, accuracy, signal, validation) as a PNG at `path` (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(13, 8.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    (reward, accuracy), (signal, validation) = fig.subplots(2, 2)
    colors = task_colors(data)
    if data.steps:
        plot_curves(reward, data, "reward", colors)
        plot_curves(accuracy, data, "accuracy", colors)
        plot_signal(signal, data)
        for ax in (reward, accuracy, signal):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        for ax in (reward, accuracy, signal):
            _empty(ax, "no per-step summaries (generations/train/steps.jsonl)")
    if data.validation:
        plot_validation(validation, data, colors)
    else:
        _empty(validation, "no validation dumps (generations/val/<step>.jsonl)")
    validations = ", ".join(map(str, data.validation)) or "none"
    fig.suptitle(f"{'/'.join(data.run_dir.parts[-2:])}: {len(data.steps)} training steps; validation at steps: "
                 f"{validations}", fontsize=12)
    fig.savefig(path, format="png")


# ----- files -----
def write_atomic(path: Path, write) -> None:
    """Calls write(temporary path) beside `path`, then renames it over `path`; nothing is left behind on failure."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_report(run_dir: str | os.PathLike, train_dir: str | os.PathLike | None = None,
                 val_dir: str | os.PathLike | None = None) -> Report:
    """Reads the run (see load_run), writes `<run>/report.png` and `<run>/report.md`; returns them with the text.

    Raises FileNotFoundError when the run folder does not exist. A figure that cannot be drawn is said in the text."""
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"no run folder at {run} (trainer.default_local_dir of the run)")
    data = load_run(run, train_dir, val_dir)
    png: Path | None = run / "report.png"
    try:
        write_atomic(png, lambda tmp: plot(data, tmp))
    except (ImportError, OSError, ValueError, RuntimeError) as err:
        data.notes.append(f"report.png not drawn: {type(err).__name__}: {err}")
        png = None
    text = render(data)
    markdown = run / "report.md"
    write_atomic(markdown, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return Report(text=text, markdown=markdown, png=png, summary=render(data, per_step=False))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.report",
                                     description="Summarise a training run: report.md (printed) and report.png.")
    parser.add_argument("run_dir", help="the run folder (trainer.default_local_dir)")
    parser.add_argument("--train-dir", help="env.dump.dir, if not <run>/generations/train")
    parser.add_argument("--val-dir", help="trainer.validation_data_dir, if not <run>/generations/val")
    args = parser.parse_args(argv)
    try:
        report = write_report(args.run_dir, args.train_dir, args.val_dir)
    except FileNotFoundError as err:
        print(err, file=sys.stderr)
        return 2
    print(report.text)
    print(f"wrote {report.markdown}" + (f" and {report.png}" if report.png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
