"""Where a run's start-up went: launch -> Ray -> each worker -> workers ready -> the first rollout, from its files.

    python -m training.report.startup RUN_DIR          # trainer.default_local_dir, or its env.logs_dir

Read from what a run writes anyway: `logs/launch.json` (the driver's launch time, written before Ray starts),
`logs/driver.log` (Ray's "Started a local Ray instance"), `logs/workers/<Actor>-<pid>.{err,out}` (each worker's first
timestamped line: the moment it had imported verl, which logs the platform it runs on) and `logs/progress.jsonl`
(workers ready, the first step and its generation seconds), and Ray's own log of each worker process
(`logs/ray/python-core-worker-*_<pid>.log`: when the process started and when its actor's `__init__` returned), so
the time a worker spends starting, importing and initialising shows apart; vLLM's own start-up lines (model load,
torch.compile, CUDA graphs, the engine's init, each with its seconds) where a run uses it. On a GPU run the same
lines name vLLM's server actors, so one tool breaks the start-up down on both (issue 46, item 3). When training
ends, the driver writes the same breakdown to `logs/startup.json`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# "[2026-11-28 13:27:21,976][...]" (hydra's driver log), "INFO:2026-11-28 13:28:23,639:..." (verl in a worker),
# "2026-11-28 13:27:27,660	INFO worker.py..." (Ray), "2026-11-28 13:32:59,533 - INFO - ..." (TransferQueue)
STAMP = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})")
# vLLM's own lines (vllm/logger.py: "INFO 11-28 13:27:21 [core.py:338] ...", second precision, no year), as its
# server actor and engine process write them into the actor's worker log: where its start-up goes
VLLM_STAMP = re.compile(r"\b(?:INFO|WARNING|DEBUG) (\d\d-\d\d \d\d:\d\d:\d\d) \[[^\]]*\] (.*)")
VLLM_MARKS = ("Starting to load model", "Loading weights took", "Model loading took", "Dynamo bytecode transform time",
              "torch.compile took", "Graph capturing finished", "init engine (profile")
LAUNCH_FILE = "launch.json"
STARTUP_FILE = "startup.json"  # written when training ends (train_grpo.py), read by gpu_kit/results.py


@dataclass(frozen=True)
class Event:
    seconds: float  # since launch (or since the earliest event when the launch time was not written)
    what: str


def write_launch(logs: Path, launched: float) -> None:
    """Records the driver's launch time and now (Ray about to start) in `logs/launch.json`, for `startup_events`."""
    logs.mkdir(parents=True, exist_ok=True)
    tmp = logs / f".{LAUNCH_FILE}.tmp"
    tmp.write_text(json.dumps({"launched": launched, "ray_starting": time.time()}))
    tmp.replace(logs / LAUNCH_FILE)


def stamp_seconds(line: str) -> float | None:
    """The epoch seconds of a log line's first timestamp (local time, as the loggers write it), else None."""
    match = STAMP.search(line)
    if match is None:
        return None
    return time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")) + int(match.group(2)) / 1000


def first_stamp(path: Path, contains: str = "") -> float | None:
    """The timestamp of the first line of `path` that has one (and contains `contains`)."""
    try:
        with open(path, errors="replace") as lines:
            for line in lines:
                if contains in line and (seconds := stamp_seconds(line)) is not None:
                    return seconds
    except OSError:
        return None
    return None


def worker_logs(workers: Path) -> list[tuple[str, str, Path]]:
    """(actor, pid, path) of each of a run's worker logs, `<Actor>-<pid>.{out,err}` (training/launch/ray_logs.py)."""
    found = []
    for path in sorted(workers.glob("*-*.*")):
        actor, _, pid = path.stem.rpartition("-")
        if pid.isdigit():
            found.append((actor, pid, path))
    return found


def worker_starts(workers: Path) -> dict[str, float]:
    """{"<Actor> (pid N)": its first timestamp} over a run's worker logs (the .err and .out of one pid together)."""
    starts: dict[str, float] = {}
    for actor, pid, path in worker_logs(workers):
        if seconds := first_stamp(path):
            name = f"{actor} (pid {pid})"
            starts[name] = min(seconds, starts.get(name, seconds))
    return starts


def process_marks(ray_logs: Path, actors: dict[int, str]) -> list[tuple[float, str]]:
    """Ray's log of each named worker process: `process started` (its core worker constructed, before Python imports
    anything of ours or verl's) and `ready` (the actor's `__init__` returned; a task's worker has no such line)."""
    marks = []
    for path in sorted(ray_logs.glob("python-core-worker-*_*.log")):
        pid = path.stem.rpartition("_")[2]
        if not pid.isdigit() or int(pid) not in actors:  # Ray's prestarted idle workers never get an actor
            continue
        name = f"{actors[int(pid)]} (pid {pid})"
        if started := first_stamp(path, "Constructing CoreWorkerProcess"):
            marks.append((started, f"process started: {name}"))
        if ready := first_stamp(path, "Actor creation task finished"):
            marks.append((ready, f"ready (__init__ done): {name}"))
    return marks


def vllm_mark(line: str, year: int) -> tuple[float, str, str] | None:
    """(epoch seconds, which VLLM_MARKS, the message) of one of vLLM's start-up lines, else None."""
    match = VLLM_STAMP.search(line)
    mark = next((m for m in VLLM_MARKS if match.group(2).startswith(m)), None) if match else None
    if mark is None:
        return None
    at = time.mktime(time.strptime(f"{year}-{match.group(1)}", "%Y-%m-%d %H:%M:%S"))
    return at, mark, match.group(2).strip()[:110]


def engine_marks(workers: Path, year: int) -> list[tuple[float, str]]:
    """vLLM's start-up lines in the worker logs (model load, torch.compile, CUDA graphs, the engine's init), the
    first of each per worker (a later one is a wake-up): `vLLM <Actor> (pid N): <its message>`, whose own seconds say
    what that part took."""
    marks, seen_by = [], {}
    for actor, pid, path in worker_logs(workers):
        seen = seen_by.setdefault(pid, set())  # the .out and .err of one process together
        try:
            with open(path, errors="replace") as lines:
                for found in filter(None, (vllm_mark(line, year) for line in lines)):
                    at, mark, message = found
                    if mark not in seen:
                        seen.add(mark)
                        marks.append((at, f"vLLM {actor} (pid {pid}): {message}"))
        except OSError:
            continue
    return marks


def progress_events(path: Path) -> dict[str, float]:
    """Epoch seconds of the trainer's "ready", "train_begin" and first "step" records, and step 1's generation seconds."""
    found: dict[str, float] = {}
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = row.get("kind")
        if kind in ("ready", "train_begin") and kind not in found:
            found[kind] = float(row["time"])
        elif kind == "step" and "step" not in found:
            found["step"] = float(row["time"])
            found["step_seconds"] = float(row.get("step_seconds") or 0)
            found["gen_seconds"] = float(row.get("gen_seconds") or 0)
    return found


def logs_folder(path: Path) -> Path:
    """A run's logs folder (env.logs_dir) from the run folder or the logs folder itself."""
    return Path(path) / "logs" if (Path(path) / "logs").is_dir() else Path(path)


def startup_events(logs: Path) -> list[Event]:
    """The run's start-up, in order, in seconds since its launch, from its logs folder (env.logs_dir)."""
    logs = Path(logs)
    launch = json.loads((logs / LAUNCH_FILE).read_text()) if (logs / LAUNCH_FILE).is_file() else {}
    at: list[tuple[float, str]] = []
    if "launched" in launch:
        at.append((launch["launched"], "launch (the driver's python starts)"))
    if "ray_starting" in launch:
        at.append((launch["ray_starting"], "driver: imports, config and checks done; starting Ray"))
    if ray := first_stamp(logs / "driver.log", "Started a local Ray instance"):
        at.append((ray, "Ray started"))
    progress = progress_events(logs / "progress.jsonl")
    # a worker that logs nothing until later (TransferQueue's, every 5 minutes) has no start-up line to show; one
    # from before this launch is an earlier launch's (a resumed run's workers/ keeps every launch's logs)
    since, until = launch.get("launched", float("-inf")), progress.get("step", float("inf"))
    at += [(seconds, f"worker up: {name}") for name, seconds in worker_starts(logs / "workers").items()
           if since <= seconds <= until]
    actors = {int(pid): actor for actor, pid, _ in worker_logs(logs / "workers")}
    at += [(seconds, what) for seconds, what in process_marks(logs / "ray", actors) if since <= seconds <= until]
    year = time.localtime(launch.get("launched") or progress.get("ready") or time.time()).tm_year
    # whole seconds: a line stamped in the second before launch is still this launch's
    at += [(seconds, what) for seconds, what in engine_marks(logs / "workers", year) if since - 1 <= seconds <= until]
    if "ready" in progress:
        at.append((progress["ready"], "workers ready (the trainer's first line)"))
    if "train_begin" in progress and progress["train_begin"] - progress.get("ready", 0) > 1:
        at.append((progress["train_begin"], "validation before training done"))
    if "step" in progress:
        generation = progress["step"] - progress["step_seconds"] + progress["gen_seconds"]
        at.append((generation, f"first rollout done (step 1's generation: {progress['gen_seconds']:.1f} s)"))
        at.append((progress["step"], f"step 1 done ({progress['step_seconds']:.1f} s)"))
    if not at:
        return []
    zero = launch.get("launched", min(seconds for seconds, _ in at))
    return [Event(seconds - zero, what) for seconds, what in sorted(at)]


def write_startup(logs: Path) -> Path | None:
    """Writes the run's start-up to `<logs>/startup.json` (`[{"seconds", "what"}]`, for readers without this module:
    the GPU kit's stage records); None when the run left no record of it."""
    events = startup_events(logs)
    if not events:
        return None
    path = Path(logs) / STARTUP_FILE
    tmp = path.with_name(f".{STARTUP_FILE}.tmp")
    tmp.write_text(json.dumps([{"seconds": round(e.seconds, 1), "what": e.what} for e in events], indent=1) + "\n")
    return tmp.replace(path)


def render(events: list[Event]) -> str:
    lines, previous = [], 0.0
    for event in events:
        lines.append(f"{event.seconds:7.1f} s  (+{event.seconds - previous:5.1f})  {event.what}")
        previous = event.seconds
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run's trainer.default_local_dir (or its env.logs_dir)")
    args = parser.parse_args(argv)
    logs = logs_folder(args.run_dir)
    events = startup_events(logs)
    if not events:
        print(f"no start-up record in {logs} (launch.json, driver.log, workers/, progress.jsonl)", file=sys.stderr)
        return 1
    print(render(events))
    return 0


if __name__ == "__main__":
    sys.exit(main())
