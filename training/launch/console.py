"""What a training run prints, and where everything else goes (`env.console: quiet|verbose`).

quiet (default): the terminal shows our checks, a bar over the steps, one line per step, validation, the report and
where the logs are. The driver's own output (verl's, Ray's) goes to `<env.logs_dir>/driver.log`; Ray does not stream
the workers' output to the driver (`ray_init.log_to_driver=false`): each worker writes to its file in Ray's session
folder, linked as `<logs>/ray` while the run lives and copied to `<logs>/workers/<actor>-<pid>.{out,err}` when it ends.
The steps reach the terminal through `<logs>/progress.jsonl` (training/trainer/progress.py), read here by a thread.
verbose: today's stream, everything on the terminal (the files are written too).
A failure in any worker ends the run with its last lines and the path of its full log on the terminal, exit code 1.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, open_dict

from training.launch.ray_logs import collect_worker_logs, link_ray_logs, ray_logs_dir, shutdown_ray
from training.trainer.progress import FAULT_FILE, HEARTBEAT_FILE, PROGRESS_FILE, resume_command

MODES = ("quiet", "verbose")
TAIL_LINES = 25
# Where the stop line goes (the terminal while driver_console runs), its resume command (made before training), and
# what was said already (ray.get hands on a new KeyboardInterrupt for the one the SIGTERM handler raised).
STOP_LINE = {"fd": 2, "resume": None, "said": set()}
_SAYING = threading.RLock()  # reentrant: a signal handler may run in the main thread while it says a line


class Terminated(KeyboardInterrupt):
    """The driver was sent SIGTERM (`kill PID`, a scheduler stopping the job): a stop asked from outside, ended like
    Ctrl-C (a KeyboardInterrupt, so no library's `except Exception` swallows it) but said as what it was."""


class TrainingFailed(Exception):
    """A worker (or the driver) failed during training; the message says where and which log has the rest
    (env.console=verbose prints it; quiet prints only the fault lines, with `worker_log` and `error_log`)."""

    def __init__(self, summary: str, worker_log: Path | None = None, error_log: Path | None = None):
        super().__init__(summary)
        self.worker_log, self.error_log = worker_log, error_log


def console_mode(cfg: DictConfig) -> str:
    """Returns env.console, checked."""
    mode = str(cfg.env.get("console", "quiet"))
    if mode not in MODES:
        raise ValueError(f"env.console={mode!r}: use quiet (our lines only; verl's in files under env.logs_dir) "
                         "or verbose (everything on the terminal)")
    return mode


def route_logs(cfg: DictConfig) -> Path:
    """Makes env.logs_dir absolute, puts TensorBoard's event files under the run directory (verl reads
    TENSORBOARD_DIR), and in quiet mode keeps the workers' output off the driver. Returns the logs folder."""
    mode = console_mode(cfg)
    logs = Path(str(cfg.env.get("logs_dir") or Path(str(cfg.trainer.default_local_dir)) / "logs")).absolute()
    with open_dict(cfg):
        cfg.env.logs_dir = str(logs)
        env_vars = dict(cfg.ray_kwargs.ray_init.get("runtime_env", {}).get("env_vars") or {})
        env_vars.setdefault("TENSORBOARD_DIR", str(tensorboard_dir(cfg)))
        cfg.ray_kwargs.ray_init.setdefault("runtime_env", {})
        cfg.ray_kwargs.ray_init.runtime_env.env_vars = env_vars
        if mode == "quiet" and cfg.ray_kwargs.ray_init.get("log_to_driver") is None:
            cfg.ray_kwargs.ray_init.log_to_driver = False
    return logs


def tensorboard_dir(cfg: DictConfig) -> Path:
    return Path(str(cfg.trainer.default_local_dir)).absolute() / "tensorboard"


def failing_worker_log(err: BaseException, worker_logs: dict[int, Path]) -> tuple[BaseException, Path | None]:
    """The error as the worker that raised it saw it, and that worker's log (None when no log can be told)."""
    log, cause, seen = None, err, 0
    while cause is not None and seen < 10:  # a worker's error arrives wrapped in its callers': take the deepest
        pid = getattr(cause, "pid", None)
        if isinstance(pid, int) and pid in worker_logs:
            log, err = worker_logs[pid], cause
        cause, seen = getattr(cause, "cause", None) or cause.__cause__, seen + 1
    for pid in reversed(re.findall(r"\bpid=(\d+)", str(err)) if log is None else []):
        if int(pid) in worker_logs:  # Ray names each worker it passed through, `ray::Actor.method() (pid=N, ...)`
            log = worker_logs[int(pid)]
            break
    if log is None:  # else the worker whose log holds the error's last line, the deepest caller last
        last = next((line.strip() for line in reversed(str(err).strip().splitlines()) if line.strip()), "")[:200]
        holders = [path for path in dict.fromkeys(worker_logs.values())
                   if last and last in path.read_text(errors="replace")] if last else []
        holders.sort(key=lambda path: "TaskRunner" in path.name)
        log = holders[0] if holders else None
    actors = re.findall(r"ray::(\w+)\.", str(err))
    if log is None and actors:  # else the log of the last actor Ray names
        log = next((path for path in worker_logs.values() if path.name.startswith(actors[-1] + "-")), None)
    return err, log


def failure_summary(err: BaseException, worker_logs: dict[int, Path], driver_log: Path | None,
                    error_log: Path | None = None) -> str:
    """The terminal's account of a failed run in verbose mode: what failed, its last lines, and the file with all."""
    err, log = failing_worker_log(err, worker_logs)
    text = str(err).strip().splitlines()
    head = f"[train] training failed: {type(err).__name__}" + (f" in {getattr(err, 'function_name', '')}"
                                                              if getattr(err, "function_name", None) else "")
    body = "\n".join(text[-TAIL_LINES:])
    where = f"full log of that worker: {log}" if log else f"worker logs: {next(iter(worker_logs.values())).parent}" \
        if worker_logs else "worker logs: Ray's session folder (/tmp/ray/session_latest/logs)"
    if error_log:
        where += f"\n[train] the whole traceback: {error_log}"
    if driver_log:
        where += f"\n[train] driver log: {driver_log}"
    return f"{head}\n{body}\n[train] {where}"


class ProgressPrinter(threading.Thread):
    """Reads progress.jsonl as the trainer appends to it; draws a bar over the steps and one line per event. The bar
    is drawn only on a terminal: redirected to a file, its once-a-second redraws would bury the lines."""

    def __init__(self, path: Path, stream, started: float):
        super().__init__(daemon=True, name="rg-grpo-progress")
        self.path, self.stream, self.started = path, stream, started
        self.stop_event = threading.Event()
        self.bar = None
        self.draws_bar = stream.isatty()
        self.first_step_seconds: float | None = None
        self.ray_logs: Path | None = None  # Ray's session log folder, once Ray has started

    def run(self):
        position = 0
        while True:
            stopping = self.stop_event.is_set()
            if self.ray_logs is None:
                self.ray_logs = link_ray_logs(self.path.parent)
            position = self.read_from(position)
            if stopping:
                break
            if self.bar is not None:
                self.bar.refresh()  # the elapsed time moves during a long step
            self.stop_event.wait(1.0)
        if self.bar is not None:
            self.bar.close()

    def read_from(self, position: int) -> int:
        try:
            with open(self.path, encoding="utf-8") as events:
                events.seek(position)
                for line in iter(events.readline, ""):
                    if not line.endswith("\n"):
                        break
                    position += len(line.encode("utf-8"))
                    self.show(json.loads(line))
        except (OSError, ValueError):
            pass
        return position

    def write(self, text: str) -> None:
        from tqdm import tqdm

        if self.bar is not None:
            tqdm.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def new_bar(self, total: int, step: int):
        from tqdm import tqdm

        return tqdm(total=total, initial=step - 1, desc="steps", file=self.stream, dynamic_ncols=True,
                    disable=not self.draws_bar)

    def show(self, event: dict) -> None:
        kind, step, total = event.get("kind"), int(event.get("step", 0)), int(event.get("total", 0))
        since = float(event.get("time", time.time())) - self.started
        if kind == "ready":
            self.write(f"[train] workers ready {since:.0f} s after launch; "
                       f"{'validating, then ' if event.get('validate_first') else ''}training {total} step(s)")
        elif kind == "recovered":  # a fault the run survived with nothing lost (training/trainer/watchdog.py)
            self.write(f"[recovered] {event.get('text', '')}")
        elif kind == "validating":
            self.write(f"[val] validating on {event.get('items', '?')} items ...")
        elif kind == "train_begin":
            self.bar = self.bar or self.new_bar(total, step)
        elif kind == "validation":
            when = "before training" if step == 0 else f"at step {step}"
            self.write(f"[val] {when}: accuracy {event['val_accuracy']:.3f} "
                       f"(mean of {event['val_sources']} task(s)), {since:.0f} s after launch")
        elif kind == "step":
            if self.bar is None:
                self.bar = self.new_bar(total, step)
            self.write(f"[step {step}/{total}] reward {event.get('reward', float('nan')):.3f}  accuracy "
                       f"{event.get('accuracy', float('nan')):.3f}  zero-variance {event.get('zero_variance', 0):.0%}"
                       f"  response {event.get('response_tokens', 0):.0f} tok  {event.get('step_seconds', 0):.1f} s"
                       f"  {event.get('tokens_per_second', 0):.0f} tok/s" + truncation_note(event) + skip_note(event)
                       + carried_note(event) + hole_note(event))
            self.bar.update(step - self.bar.n)
            if "val_accuracy" in event:
                self.show({**event, "kind": "validation"})


def truncation_note(event: dict) -> str:
    """The step line's note when responses were cut at data.max_response_length: the share, and per task."""
    if not event.get("truncated"):
        return ""
    tasks = ", ".join(f"{task} {share:.0%}" for task, share in (event.get("truncated_tasks") or {}).items())
    return f"  cut at max_response_length {event['truncated']:.0%}" + (f" ({tasks})" if tasks else "")


def skip_note(event: dict) -> str:
    """The step line's note when the update left zero-advantage sequences out (training/zero_advantage/rules.py)."""
    if event.get("optimizer_step_skipped", 0) >= 1:
        return "  no optimizer step (every sequence had advantage 0)"
    if not event.get("update_skipped"):
        return ""
    note = f"  update skipped {event['update_skipped']:.0%} (zero advantage)"
    if event.get("optimizer_step_skipped"):
        note += f", no optimizer step on {event['optimizer_step_skipped']:.0%} of mini-batches"
    return note


def carried_note(event: dict) -> str:
    """The step line's note in async mode: the share of responses begun under older weights (some resumed across
    an update: partial rollout) and the most steps any lagged the weights trained."""
    if "carried_over" not in event:
        return ""
    return (f"  carried over {event['carried_over']:.0%} (resumed {event.get('resumed', 0):.0%}, "
            f"staleness <= {event.get('staleness_max', 0):.0f})")


def hole_note(event: dict) -> str:
    """The step line's warnings of a task whose full marks look like a hole in the reward (envs.hole_signals)."""
    return "".join(f"  {warning}" for warning in event.get("reward_holes") or ())


@contextmanager
def driver_console(cfg: DictConfig, started: float):
    """Around the training launch: in quiet mode the driver's fd 1/2 go to `<logs>/driver.log` while our lines go
    to the terminal; the progress thread runs in both modes. Worker logs are collected at the end; a failure
    becomes TrainingFailed with its summary. Yields the logs folder."""
    logs = Path(str(cfg.env.logs_dir))
    logs.mkdir(parents=True, exist_ok=True)
    progress = logs / PROGRESS_FILE
    for stale in (PROGRESS_FILE, FAULT_FILE, HEARTBEAT_FILE):  # a resumed run's logs folder holds the last run's
        (logs / stale).unlink(missing_ok=True)
    quiet = console_mode(cfg) == "quiet"
    driver_log = logs / "driver.log" if quiet else None
    sys.stdout.flush(), sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    terminal = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    if quiet:
        with open(driver_log, "a") as log:
            os.dup2(log.fileno(), 1), os.dup2(log.fileno(), 2)
    printer = ProgressPrinter(progress, terminal, started)
    printer.start()
    STOP_LINE.update(fd=saved[1], said=set(), resume=resume_command())
    failure: BaseException | None = None
    try:
        yield logs
    except BaseException as err:  # noqa: BLE001 - summarised below, then raised as TrainingFailed
        failure = err
        if not isinstance(err, Terminated) and "stopped by SIGTERM" in STOP_LINE["said"]:
            failure = Terminated("SIGTERM")  # the job's cluster stopped with the signal (the failure is the stop's
            failure.__cause__ = err  # doing), or ray.get handed the signal's exception on as a plain KeyboardInterrupt
    finally:
        if isinstance(failure, KeyboardInterrupt):  # said before Ray's shutdown, which can outlast a scheduler's grace
            say_stop(failure)
        ray_logs = None
        try:
            printer.stop_event.set()
            printer.join(timeout=5)
            ray_logs = ray_logs_dir() or printer.ray_logs
            shutdown_ray()  # before the terminal is given back: what Ray says as it kills its workers goes to the log
        except KeyboardInterrupt as stop:  # a stop during the clean-up (a job's SIGTERM after its cluster died) ends
            failure = stop  # the launch as stopped; the terminal is given back all the same
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            with _SAYING:  # the watcher thread writes to the old fd before this, or to fd 2 after it
                STOP_LINE.update(fd=2, resume=None)  # the terminal is fd 2 again
            os.close(saved[0]), os.close(saved[1])
            terminal.close()
        worker_logs = collect_worker_logs(ray_logs or printer.ray_logs, logs)
    if failure is not None:
        if isinstance(failure, KeyboardInterrupt):
            raise failure
        error_log = logs / "error.log"
        try:
            error_log.write_text(f"{type(failure).__name__}: {failure}\n")
        except OSError:
            error_log = None
        raise TrainingFailed(failure_summary(failure, worker_logs, driver_log, error_log),
                             failing_worker_log(failure, worker_logs)[1], error_log) from failure


def say_stop(stop: KeyboardInterrupt) -> None:
    """Writes "[train] interrupted" (Ctrl-C) or "[train] stopped by SIGTERM" and the resume command to the terminal,
    once. The SIGTERM handler says it the moment the signal arrives: a scheduler follows SIGTERM with SIGKILL after a
    grace (SLURM's KillWait, 30 s by default), and what comes after the signal (Ray's shutdown, the cluster's head
    stopping with the job) can outlast it, or lose the exception (twice in CI, scancel: no line, the job killed)."""
    what = "stopped by SIGTERM" if isinstance(stop, Terminated) else "interrupted"
    with _SAYING:  # the SIGTERM watcher thread and the main thread's handler may both get here
        if what in STOP_LINE["said"]:
            return
        resume = STOP_LINE.get("resume") or resume_command()
        os.write(STOP_LINE["fd"], f"\n[train] {what}; to resume from the last checkpoint: {resume}\n".encode())
        STOP_LINE["said"].add(what)


def where_logs_are(cfg: DictConfig) -> str:
    """The console's last lines: where the files of this run are."""
    logs = Path(str(cfg.env.logs_dir))
    lines = [f"[logs] verl, Ray and worker output: {logs} (driver.log, workers/)"]
    if "tensorboard" in list(cfg.trainer.get("logger") or []):
        lines.append(f"[logs] TensorBoard: tensorboard --logdir {tensorboard_dir(cfg)}")
    return "\n".join(lines)
