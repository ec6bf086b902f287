"""The run's progress as events in a file, its fault as a record, and the command that resumes it, for the driver's
console (training/launch/console.py).

verl logs every step's metrics through its `Tracking` object (`trainer.logger`), in the Ray task runner's process;
the driver, whose terminal the person watches, is another process. `ProgressTracking` wraps verl's Tracking: every
`log()` still reaches verl's backends, and a few numbers of it are appended as one JSON line to
`<env.logs_dir>/progress.jsonl`, which the driver reads. The trainer installs it where verl assigns `self.logger`.

What is no number rides on the next step's event: the trainer hands it over with `hold_for_step` (the reward-hole
warnings of training/trainer/metrics.py, `reward_holes`, which are also logged as warnings in the trainer's log).

Every number of every `log()` also goes, whole, to `<env.logs_dir>/metrics.jsonl` (utils/metrics_file.py): the
record to read a step's metrics from. verl's console line
is a view: it reaches the driver through Ray's log monitor, which reads worker output line by line while it is being
written, and can cut a line of ~4 KiB in two (CI of 21748d5 lost the last key of a step's line that way).
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import sys
import time
from pathlib import Path

from utils.metrics_file import METRICS_FILE, end_cut_line, metrics_record

PROGRESS_FILE = "progress.jsonl"
FAULT_FILE = "fault.json"  # the run's first fault (training/trainer/faults.py, watchdog.py, training/launch/guardian.py)
HEARTBEAT_FILE = "heartbeat.json"  # the trainer's watchdog beats here; the guardian reads it
STEP_KEYS = {  # console name -> verl / env metric
    "reward": "env/reward",
    "accuracy": "env/accuracy",
    "zero_variance": "env/zero_variance_groups",
    "truncated": "env/truncated",
    "response_tokens": "response_length/mean",
    "step_seconds": "timing_s/step",
    "tokens_per_second": "perf/throughput",
    "gen_seconds": "timing_s/gen",
    # shares the actor's update left out (training/zero_advantage/rules.py); 1.0: no optimizer step
    "update_skipped": "actor/update_skipped/sequences",
    "update_skipped_tokens": "actor/update_skipped/tokens",
    "optimizer_step_skipped": "actor/update_skipped/optimizer_step",
    # async mode (training/trainer/trainer.py): responses begun under older weights, and verl's worst staleness
    "carried_over": "async/carried_over",
    "resumed": "async/resumed",
    "staleness_max": "training/off_policy/trajectory_staleness_worst/max",
}
TRUNCATED_PREFIX = "env/truncated/"  # env/truncated/<task>: share of the task's responses cut (training/trainer/metrics.py)
logger = logging.getLogger(__name__)
VAL_ACCURACY = re.compile(r"^val-core/(?P<source>.+)/acc/mean@(?P<n>\d+)$")


def validation_accuracy(metrics: dict) -> tuple[float, int] | None:
    """Returns (mean accuracy over the validation's data sources, number of sources) from verl's val-core metrics."""
    best: dict[str, tuple[int, float]] = {}
    for key, value in metrics.items():
        match = VAL_ACCURACY.match(key)
        if match:
            n = int(match["n"])
            if match["source"] not in best or n < best[match["source"]][0]:
                best[match["source"]] = (n, float(value))
    if not best:
        return None
    return sum(v for _, v in best.values()) / len(best), len(best)


def progress_event(data: dict, step: int, total: int) -> dict | None:
    """Returns the console's event for one verl `log()` call: a training step, a validation, or None."""
    event: dict = {"step": int(step), "total": int(total), "time": time.time()}
    if "timing_s/step" in data:
        event["kind"] = "step"
        event.update({name: float(data[key]) for name, key in STEP_KEYS.items() if key in data})
        cut = {key[len(TRUNCATED_PREFIX):]: float(value) for key, value in data.items()
               if key.startswith(TRUNCATED_PREFIX) and float(value) > 0}
        if cut:  # per task, for the console's step line
            event["truncated_tasks"] = dict(sorted(cut.items()))
    val = validation_accuracy(data)
    if val is not None:
        event["val_accuracy"], event["val_sources"] = val
        event.setdefault("kind", "validation")
    return event if "kind" in event else None


def append_event(path: Path, event: dict) -> None:
    """Appends one event line (opened per write: a reader never sees half a line buffered away)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(event) + "\n")


class ProgressTracking:
    """verl's Tracking, plus one event line per step or validation in `progress`, and every number in `metrics`.
    Everything else is delegated."""

    def __init__(self, tracking, logs: Path, total_steps: int):
        self._tracking, self._total = tracking, int(total_steps)
        self._progress, self._metrics = Path(logs) / PROGRESS_FILE, Path(logs) / METRICS_FILE
        self.held: dict = {}  # fields for the next step event (hold_for_step)
        try:  # a killed process may have left half a line: this process's records start on a line of their own
            end_cut_line(self._metrics)
        except OSError:  # a view and a record: training goes on without them
            pass

    def log(self, data, step, backend=None):
        self._tracking.log(data=data, step=step, backend=backend)
        if backend is None:
            try:
                append_event(self._metrics, metrics_record(data, step))
                event = progress_event(data, step, self._total)
                if event and event["kind"] == "step":
                    event.update(self.held)
                    self.held = {}
                    for warning in event.get("reward_holes") or ():
                        logger.warning("step %s: %s", step, warning)
                if event:
                    append_event(self._progress, event)
            except (OSError, TypeError, ValueError):  # a view and a record: training goes on without them
                pass

    def __getattr__(self, name):
        return getattr(self._tracking, name)


def hold_for_step(tracking, **fields) -> None:
    """Puts `fields` (JSON values; an empty one takes back what was held under its name) on the next step event of
    `tracking`, a ProgressTracking (anything else, None before verl assigns the logger, is left alone)."""
    if isinstance(tracking, ProgressTracking):
        for name, value in fields.items():
            if value:
                tracking.held[name] = value
            else:
                tracking.held.pop(name, None)


def write_fault(logs: Path, kind: str, text: str, details: Path | None = None) -> bool:
    """Records the run's first fault (`kind`: dead, hung, ...) in <logs>/fault.json for the driver's console;
    returns False (and writes nothing) when one is already recorded: later symptoms of a fault do not replace it."""
    path = Path(logs) / FAULT_FILE
    record = json.dumps({"kind": kind, "text": text, "details": str(details) if details else None})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "x", encoding="utf-8") as out:  # exclusive creation: the first fault wins, across processes
            out.write(record)
        return True
    except OSError:
        return False


def read_fault(logs: Path) -> dict | None:
    """The run's recorded fault, or None."""
    try:
        return json.loads((Path(logs) / FAULT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def resume_command(argv: list[str] | None = None) -> str:
    """The command that continues this run (trainer.resume_mode=auto resumes from the latest complete checkpoint)."""
    argv = list(sys.argv if argv is None else argv)
    return " ".join(shlex.quote(part) for part in ["python", *argv])
