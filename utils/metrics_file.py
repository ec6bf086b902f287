"""A run's `<logs>/metrics.jsonl`: every number verl logged, one `{"step": N, "data": {...}}` line per `log()` (verl's
file-logger shape), appended across resumes. The trainer writes it (training/trainer/progress.py); tests,
utils/compare_runs.py and a reader read it. (gpu_kit/results.py reads it too, with its own stdlib lines: the kit
imports nothing of the project's.)
"""

from __future__ import annotations

import json
import numbers
import os
from pathlib import Path

METRICS_FILE = "metrics.jsonl"


def metrics_record(data: dict, step: int) -> dict:
    """The line of one `log()`: every number in `data` (numpy scalars as Python numbers), as verl's console line
    keeps them."""
    numbers_only = {key: value.item() if hasattr(value, "item") else value for key, value in data.items()
                    if isinstance(value, numbers.Number)}
    return {"step": int(step), "data": numbers_only}


def end_cut_line(path: Path) -> None:
    """Ends a last line that a killed process left without its newline, so that the next record starts a line of
    its own (the cut one is then skipped by read_metrics). Nothing to do without a file."""
    try:
        with open(path, "rb+") as record:
            size = record.seek(0, os.SEEK_END)
            if size:
                record.seek(size - 1)
                if record.read(1) != b"\n":
                    record.write(b"\n")
    except FileNotFoundError:
        pass


def read_metrics(logs: Path) -> dict[int, dict[str, float]]:
    """{step: metrics} from `<logs>/metrics.jsonl` ({} without it); of a step logged twice (taken again after a resume
    from an earlier checkpoint) the last record; a line cut short by a killed process is skipped."""
    steps: dict[int, dict[str, float]] = {}
    path = Path(logs) / METRICS_FILE
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        steps[record["step"]] = record["data"]
    return steps
