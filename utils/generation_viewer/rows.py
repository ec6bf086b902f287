"""Reading a run's generation files into the viewer's rows: training dumps, verl's dumps, the evaluator's file.

The one reader of those files (training/report/report.py reads the same files through `read_jsonl`).
"""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

STEP_FILE = re.compile(r"^\d+\.jsonl$")
SUMMARY_FILE = "steps.jsonl"  # training/generations.SUMMARY_FILE (not imported: the viewer needs no training stack)
EVAL_FILE = "generations.jsonl"
DEFAULT_MAX_CHARS = 20_000


def find_files(path: Path) -> list[Path]:
    """Returns the generation and summary files under `path` (a file is returned as given), sorted."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or folder")
    root = path / "generations" if (path / "generations").is_dir() else path
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("global_step_"))
        found += [Path(folder) / f for f in files if STEP_FILE.match(f) or f in (SUMMARY_FILE, EVAL_FILE)]
    return sorted(found)


def read_jsonl(path: Path) -> Iterable[dict]:
    """Yields the JSON objects of a file; an unreadable line (a run cut mid-write) is skipped."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    value = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    yield value


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN -> None


def _clip(text: str | None, max_chars: int) -> str | None:
    if text is None or len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n[... {len(text) - max_chars} more characters not shown]"


def verl_source(path: Path) -> str:
    """`val` for verl's validation dumps (a folder named val*/valid*), else `rollout` (its training dump)."""
    return "val" if path.parent.name.lower().startswith("val") else "rollout"


def normalize(raw: dict, path: Path, max_chars: int) -> dict | None:
    """Returns one page row {source, step, task, group, sample, prompt, response, expected, pred, score, acc, found,
    reason, length, unit} from any of the three formats, or None for a line of none of them."""
    if "item_id" in raw:  # evaluator
        length, unit = raw.get("num_tokens"), "tokens"
        row = {"source": "eval", "step": None, "task": f"{raw.get('group', '')}/{raw.get('task_key', raw.get('task'))}",
               "group": raw["item_id"], "sample": raw.get("sample", 0), "prompt": raw.get("question"),
               "response": raw.get("response"), "expected": raw.get("answer"), "pred": raw.get("pred"),
               "score": raw.get("score"), "acc": raw.get("accuracy"), "found": raw.get("answer_found"),
               "reason": raw.get("reason")}
    elif "prompt" in raw and "response" in raw:  # training/trainer/generations.py
        length, unit = raw.get("response_length"), "tokens"
        row = {"source": "train", "step": raw.get("step"), "task": raw.get("task"), "group": raw.get("group"),
               "sample": raw.get("sample", 0), "prompt": raw["prompt"], "response": raw["response"],
               "expected": raw.get("ground_truth"), "pred": raw.get("pred"), "score": raw.get("score"),
               "acc": raw.get("acc"), "found": raw.get("answer_found"), "reason": raw.get("reason")}
    elif "input" in raw and "output" in raw:  # verl's _write_generations
        if raw.get("response_length") is not None:
            length, unit = raw.get("response_length"), "tokens"
        else:
            length, unit = raw.get("response_chars"), "chars"
        uid = str(raw.get("uid", ""))
        parts = uid.rsplit("_", 2)
        row = {"source": verl_source(path), "step": raw.get("step"), "task": raw.get("task"),
               "group": parts[0] if len(parts) == 3 else uid, "sample": None, "prompt": raw["input"],
               "response": raw["output"], "expected": raw.get("gts"), "pred": raw.get("pred"),
               "score": raw.get("score"), "acc": raw.get("acc"), "found": raw.get("answer_found"),
               "reason": raw.get("reason")}
    else:
        return None
    step = _number(row["step"])
    row.update(step=None if step is None else int(step), task=str(row["task"] or "unknown"),
               group=str(row["group"] or ""), prompt=_clip(_text(row["prompt"]), max_chars) or "",
               response=_clip(_text(row["response"]), max_chars) or "", expected=_clip(_text(row["expected"]), 2000),
               pred=_clip(_text(row["pred"]), 2000), score=_number(row["score"]), acc=_number(row["acc"]),
               found=_number(row["found"]), reason=str(row["reason"] or ""), length=_number(length), unit=unit)
    return row


def number_samples(rows: list[dict]) -> None:
    """Gives rows without a sample index (verl's dumps) their position within their (source, step, group)."""
    seen: dict[tuple, int] = defaultdict(int)
    for row in rows:
        key = (row["source"], row["step"], row["group"])
        if row["sample"] is None:
            row["sample"] = seen[key]
        seen[key] += 1


def load(paths: Iterable[Path], max_chars: int = DEFAULT_MAX_CHARS) -> tuple[list[dict], dict[int, dict]]:
    """Returns (rows, training summaries {step: {task: means}}) from files or folders; last summary of a step wins."""
    rows, summaries = [], {}
    for path in paths:
        files = find_files(Path(path))
        for file in files:
            if file.name == SUMMARY_FILE:
                for line in read_jsonl(file):
                    if "step" in line and isinstance(line.get("tasks"), dict):
                        summaries[int(line["step"])] = line["tasks"]
                continue
            rows += [row for row in (normalize(raw, file, max_chars) for raw in read_jsonl(file)) if row]
    rows.sort(key=lambda r: (r["source"], -1 if r["step"] is None else r["step"], r["task"], r["group"]))
    number_samples(rows)
    return rows, summaries


# ----- per-task reward over steps -----
def reward_series(rows: list[dict], summaries: dict[int, dict]) -> dict[str, dict]:
    """Returns {source: {"title", "tasks": {task: [[step, mean reward, samples], ...]}}} for sources with 2+ steps.

    Training uses steps.jsonl (every response of each step) when present, else the dumped rows.
    """
    sums: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        if row["step"] is None or row["score"] is None:
            continue
        if row["source"] == "train" and summaries:
            continue
        total = sums[row["source"]][row["task"]].setdefault(row["step"], [0.0, 0])
        total[0] += row["score"]
        total[1] += 1
    series = {}
    for source, tasks in sorted(sums.items()):
        series[source] = {"title": f"{source}: mean reward per task (the dumped generations)",
                          "tasks": {task: [[step, s / n, n] for step, (s, n) in sorted(points.items())]
                                    for task, points in sorted(tasks.items())}}
    if summaries:
        by_task: dict[str, list] = defaultdict(list)
        for step, tasks in sorted(summaries.items()):
            for task, means in sorted(tasks.items()):
                if _number(means.get("reward")) is not None:
                    by_task[task].append([step, float(means["reward"]), int(means.get("samples", 0))])
        series["train"] = {"title": "train: mean reward per task (every response of each step)",
                           "tasks": dict(sorted(by_task.items()))}
    if "val" in series:
        series["val"]["title"] = "val: mean reward per task (the validation set)"
    return {source: s for source, s in sorted(series.items())
            if len({p[0] for points in s["tasks"].values() for p in points}) >= 2}
