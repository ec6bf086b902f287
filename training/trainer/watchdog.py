"""Hangs are faults: a run that stops making progress is stopped, or recovered, within a bound taken from the run.

A thread in the trainer's process (Ray's task runner) watches the time since the run last made progress. Progress is
a step, a checkpoint save or a validation beginning or ending, one of verl's phases of a step ending (gen,
old_log_prob, update_actor, update_weights, ... as they appear in its timing dict), a rollout session starting or
ending (the replay buffer's view of TransferQueue), or a producer process being replaced. So a step that is slow but
moving never trips it; a stall does.

The bound (env.watchdog) is `max(min_seconds, factor x the slowest healthy step so far)`; checkpoint saves and
validations keep their own slowest (a save is not a step). The first step is a warm-up (imports in the scoring
processes, first allocations) and stands in only until the second is measured. Before the first of a kind:
`first_seconds`, by default `factor x` the start-up time (Ray start to workers ready); the start-up itself:
`startup_seconds`. A step during which something was recovered is not a healthy one.

Past the bound the watchdog asks every process of the run for its pid (training/trainer/processes.py):
- a dead one stops the run, named;
- a stopped one (SIGSTOP, a debugger), or a silent idle one while nothing computes, is hung: a reward worker is
  restarted (Ray retries its calls: nothing lost, a `[recovered]` line on the console); any other stops the run,
  named as hung;
- with no culprit it waits: until twice the bound when every process answers (e.g. a GPU engine wedged behind a
  server that still answers), three times when one is silent but computing (a slow step on a loaded machine); then
  it stops, naming the stalled activity, what it saw and where the trainer waits.
To stop, it writes the fault record the driver prints (training/trainer/faults.py) and the threads' stacks to
`<logs>/hang-<pid>.txt`, SIGKILLs what it named so that the blocked calls fail and verl unwinds, and ends the process
if it has not ended GRACE_SECONDS later. The last checkpoint is untouched. Producer processes time out on their own
after half the bound (envs/producer.py): their items are generated again in a fresh process, nothing lost.
Every HEARTBEAT_SECONDS it writes `<logs>/heartbeat.json`, which the launching side's guardian reads: a trainer
process that stops beating for longer than the bound is itself hung (training/launch/guardian.py).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from training.trainer.processes import ALIVE, DEAD, SILENT, kill, probe, run_processes
from training.trainer.progress import HEARTBEAT_FILE, PROGRESS_FILE, append_event, write_fault

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
PING_SECONDS = 10.0  # how long a process may take to answer once the bound has passed
CENSUS_SECONDS = 5.0  # how long the census at each step waits for pids (a busy one answers at a later step)
CENSUS_RETRY_SECONDS = 15.0
GRACE_SECONDS = 10.0  # after a fault, how long verl may take to unwind before the process ends itself


@dataclass
class WatchdogSettings:
    """env.watchdog."""

    enabled: bool = True
    factor: float = 5.0  # a stall longer than factor x the slowest healthy step (save, validation) so far is a hang
    min_seconds: float = 60.0  # no bound is shorter (a loaded machine stretches a step)
    first_seconds: float | None = None  # bound before the first of a kind completes; None: factor x start-up time
    startup_seconds: float = 1800.0  # bound on the start-up (workers, rollout servers, checkpoint load)

    @classmethod
    def from_config(cls, config) -> "WatchdogSettings":
        values = dict(config.env.get("watchdog") or {})
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"env.watchdog: unknown keys {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}")
        settings = cls(**values)
        if settings.factor <= 1 or settings.min_seconds <= 0:
            raise ValueError(f"env.watchdog: factor must be > 1 and min_seconds > 0 (got {settings.factor}, "
                             f"{settings.min_seconds})")
        return settings


@dataclass
class _Frame:
    kind: str  # start-up, step, save, validation, shutdown
    label: str  # what the console calls it: "step 3", "the checkpoint save of step 4"
    started: float
    nested: float = 0.0  # seconds of nested frames (a save, a validation) inside a step
    timed: bool = True  # its duration counts as a healthy instance of its kind


class Watchdog:
    """Called from the trainer's thread at each activity's edges; watches from its own thread."""

    def __init__(self, trainer, settings: WatchdogSettings, logs_dir: Path):
        self.trainer, self.settings, self.logs = trainer, settings, Path(logs_dir)
        self.lock = threading.Lock()
        now = time.monotonic()
        self.frames = [_Frame("start-up", "start-up", now, timed=False)]
        self.began, self.last_progress, self.startup = now, now, None
        self.slowest: dict[str, float] = {}
        self.steps_timed = 0
        self.signature, self.seen, self.recount, self.producer_hangs = None, 0, False, 0
        self.probes = 0  # probes of the current stall
        self.faulted_at: float | None = None
        self.resting = False  # training is over and succeeded: nothing to watch
        self.done = threading.Event()
        self.trainer_thread = threading.get_ident()
        self.known: dict[str, tuple[int | None, bool]] = {}  # role -> (pid, local), from earlier answers
        self.census_due = False  # learn the processes' pids while they answer (a stopped one cannot tell)
        self.census_next = 0.0
        self.restarting: set[str] = set()  # roles this watchdog restarted that have not answered since

    def start(self) -> "Watchdog":
        if self.settings.enabled:
            threading.Thread(target=self._run, daemon=True, name="rg-grpo-watchdog").start()
            threading.Thread(target=self._beat_forever, daemon=True, name="rg-grpo-heartbeat").start()
        return self

    # ----- the trainer's side: activity edges (each one is progress)

    def ready(self) -> None:
        """Workers are up: the start-up time is known; until the first step begins, the first-step bound holds."""
        self.census_due = True
        with self.lock:
            self.startup = time.monotonic() - self.began
            self._replace(_Frame("step", "the time before step 1", time.monotonic(), timed=False))

    def step_begin(self, step: int) -> None:
        # new processes (agent loop workers, restarted reward workers) since the last census: asked at once
        self.census_due, self.census_next = True, 0.0
        with self.lock:
            self._replace(_Frame("step", f"step {step}", time.monotonic()))

    def enter(self, kind: str, label: str) -> None:
        with self.lock:
            self.frames.append(_Frame(kind, label, time.monotonic()))
            self._touch()

    def leave(self) -> None:
        with self.lock:
            if len(self.frames) > 1:
                frame = self.frames.pop()
                seconds = self._record(frame)
                self.frames[-1].nested += seconds
            self._touch()

    def finish(self, failed: bool) -> None:
        """fit ended: after a success verl's tear-down (a logger's upload, say) is not watched; after a failure it
        gets GRACE_SECONDS, then the process ends (its fault is recorded)."""
        with self.lock:
            self._replace(_Frame("shutdown", "the trainer's shutdown", time.monotonic(), timed=False))
            if failed and self.faulted_at is None:
                self.faulted_at = time.monotonic()
            self.resting = not failed

    def stop(self) -> None:
        """The task runner returned: nothing more to watch; the heartbeat says so."""
        self.done.set()
        self._beat(final=True)

    def _replace(self, frame: _Frame) -> None:
        while len(self.frames) > 1:
            self.frames[-2].nested += self._record(self.frames.pop())
        self._record(self.frames[0])
        self.frames = [frame]
        self._touch()

    def _record(self, frame: _Frame) -> float:
        """Keeps the slowest healthy duration of the frame's kind. The first step is a warm-up (imports in the
        scoring processes, first allocations: often several times a later step): it stands in only until the
        first step after it is measured."""
        seconds = time.monotonic() - frame.started
        if frame.timed and self.faulted_at is None:
            healthy = seconds - frame.nested
            if frame.kind == "step":
                self.steps_timed += 1
            if frame.kind == "step" and self.steps_timed <= 2:
                self.slowest["step"] = healthy
            else:
                self.slowest[frame.kind] = max(self.slowest.get(frame.kind, 0.0), healthy)
        return seconds

    def _touch(self, edge: bool = True) -> None:
        """Progress now; at an activity's edge the replay buffer's tables are counted afresh."""
        self.last_progress, self.probes = time.monotonic(), 0
        self.recount = self.recount or edge

    # ----- bounds

    def bound(self, kind: str | None = None) -> float:
        """Seconds without progress after which the current activity (or `kind`) is hung."""
        settings = self.settings
        kind = kind or self.frames[-1].kind
        if kind == "start-up":
            return settings.startup_seconds
        if kind in self.slowest:
            return max(settings.min_seconds, settings.factor * self.slowest[kind])
        first = settings.first_seconds or settings.factor * (self.startup or settings.startup_seconds)
        return max(settings.min_seconds, first, settings.factor * self.slowest.get("step", 0.0))

    def explain_bound(self, kind: str) -> str:
        settings = self.settings
        if kind == "start-up":
            return f"env.watchdog.startup_seconds={settings.startup_seconds:g}"
        if kind in self.slowest:
            return (f"{settings.factor:g} x the slowest {kind} so far, {self.slowest[kind]:.1f} s; "
                    f"at least env.watchdog.min_seconds={settings.min_seconds:g}")
        if settings.first_seconds:
            return f"env.watchdog.first_seconds={settings.first_seconds:g} before the first {kind}"
        return (f"{settings.factor:g} x the start-up time, {self.startup or 0:.0f} s, before the first {kind} "
                f"completes; at least env.watchdog.min_seconds={settings.min_seconds:g}")

    # ----- the watching thread

    def _run(self) -> None:
        while not self.done.is_set():
            try:
                self._check(time.monotonic())
            except Exception:  # noqa: BLE001 - the watchdog must never stop the run by failing itself
                logger.warning("watchdog check failed", exc_info=True)
            self.done.wait(1.0)

    def _beat_forever(self) -> None:
        """Its own thread, so that a probe (up to PING_SECONDS) never delays a beat."""
        while not self.done.wait(HEARTBEAT_SECONDS):
            self._beat()

    def _check(self, now: float) -> None:
        if self.resting:
            return
        if self.faulted_at is not None:
            if now - self.faulted_at > GRACE_SECONDS:
                logger.error("the run did not end %.0f s after its fault; ending the trainer process", GRACE_SECONDS)
                logging.shutdown()
                os._exit(1)
            return
        if self._moved():
            with self.lock:
                self._touch(edge=False)
            return
        with self.lock:
            frame, stalled = self.frames[-1], now - self.last_progress
            bound = self.bound(frame.kind)
        if self.census_due and stalled < bound / 2 and now >= self.census_next:
            self.census_next = now + CENSUS_RETRY_SECONDS  # a process that did not answer is asked again later
            self.census_due = self._census()
        # probed past the bound, then past twice and three times the bound while no culprit is found
        if stalled > bound * (self.probes + 1) and self.probes < 3:
            self.probes += 1
            self._diagnose(frame, stalled, bound)

    def _moved(self) -> bool:
        """True when the trainer's own state shows progress since the last look (see the module docstring)."""
        trainer = self.trainer
        timing = getattr(trainer, "timing_raw", None)
        stats = getattr(getattr(getattr(trainer, "train_dataset", None), "stream", None), "stats", None) or {}
        signature = (id(timing), len(timing or ()), stats.get("producer_respawns", 0))
        buffer, seen = getattr(trainer, "replay_buffer", None), 0
        try:  # read while verl rebuilds these tables each poll: a partial view is smaller, never larger
            for table in (buffer.partitions, buffer.running_keys, buffer.finished_keys, buffer.failure_keys):
                seen += sum(len(keys) for keys in list(table.values()))
        except (AttributeError, RuntimeError):
            seen = 0
        hangs = stats.get("producer_hangs", 0)
        if self.signature is not None and hangs > self.producer_hangs:
            self._recovered(f"a producer process hung (no answer for more than {self.producer_timeout():.0f} s); "
                            "replaced, its items generated again in a fresh one (nothing lost)")
        self.producer_hangs = hangs
        moved = self.signature is not None and signature != self.signature
        if moved or self.signature is None or self.recount:
            self.seen, self.recount = seen, False  # a new step or activity counts from where its tables are
        elif seen > self.seen:
            moved, self.seen = True, seen
        self.signature = signature
        return moved

    def _census(self) -> bool:
        """Asks the processes whose pid is unknown, and the restartable ones (a restart changes it), for their pid;
        returns True while one of them has not answered (asked again at the next check). A reward worker that
        answers with a new pid was restarted by Ray during this activity: not a healthy one."""
        processes = [p for p in run_processes(self.trainer) if p.role not in self.known or p.restartable]
        unanswered = False
        for result in probe(processes, CENSUS_SECONDS) if processes else []:
            role = result.process.role
            if result.state != ALIVE:
                unanswered = True
                continue
            self.restarting.discard(role)
            if self.known.get(role, (None,))[0] not in (None, result.process.pid):
                logger.warning("%s was restarted (pid %s -> %s)", role, self.known[role][0], result.process.pid)
                with self.lock:
                    for frame in self.frames:
                        frame.timed = False
            self.known[role] = (result.process.pid, result.process.local)
        return unanswered

    def _diagnose(self, frame: _Frame, stalled: float, bound: float) -> None:
        """Names the culprit of a stall: a dead process; a stopped one; a silent idle one when none computes.
        A restartable culprit is restarted; any other stops the run. With no culprit it waits: one more bound when
        every process answers, two when one is silent but computing (a slow step on a loaded machine)."""
        processes = run_processes(self.trainer)
        for process in processes:
            process.pid, process.local = self.known.get(process.role, (None, False))
        probes = probe(processes, PING_SECONDS)
        for result in probes:
            if result.process.pid:
                self.known[result.process.role] = (result.process.pid, result.process.local)
        dead = [p for p in probes if p.state == DEAD]
        silent = [p for p in probes if p.state == SILENT]
        for result in silent:  # restarted by this watchdog and not back yet: given time, like a busy one
            if result.process.role in self.restarting:
                result.busy, result.stopped, result.detail = True, False, "restarting"
        busy = [p for p in silent if p.busy]
        culprits = [p for p in silent if p.stopped or not busy and not p.busy]
        head = (f"{frame.label} made no progress for {stalled:.0f} s (bound {bound:.0f} s = "
                f"{self.explain_bound(frame.kind)})")
        if dead:
            self._stop("dead", f"{head}; dead: " + "; ".join(p.describe() for p in dead), dead + culprits)
        elif culprits and all(p.process.restartable for p in culprits):
            for result in culprits:
                kill(result.process)
                self.restarting.add(result.process.role)
            self._recovered(f"{'; '.join(p.describe() for p in culprits)}: hung ({head}); restarted by Ray, its "
                            "calls retried (nothing lost)")
        elif culprits:
            self._stop("hung", f"{head}; hung: " + "; ".join(p.describe() for p in culprits), culprits)
        elif stalled > (3 if busy else 2) * bound:
            self._stop("hung", f"{head}; no process is stopped, dead or idle"
                       + (f" ({'; '.join(p.describe() for p in busy)})" if busy else ", every one answers")
                       + f"; the trainer waits in {self._waiting_in()}", [])
        else:
            logger.warning("%s; no process is stopped, dead or idle%s: waiting", head,
                           f" ({'; '.join(p.describe() for p in busy)})" if busy else "")

    def _waiting_in(self) -> str:
        """The trainer thread's innermost calls in verl, TransferQueue or this project (where it is blocked)."""
        frame = sys._current_frames().get(self.trainer_thread)
        calls = [f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_stack(frame)
                 if any(part in f.filename for part in ("/verl/", "/training/", "/envs/", "/transfer_queue/"))]
        return " > ".join(calls[-4:]) or "an unknown place"

    def _stop(self, kind: str, text: str, culprits: list) -> None:
        self.faulted_at = time.monotonic()
        stacks = self.logs / f"hang-{os.getpid()}.txt"
        try:
            with open(stacks, "w") as out:
                out.write(text + "\n\n")
                names = {thread.ident: thread.name for thread in threading.enumerate()}
                for ident, frame in sys._current_frames().items():
                    out.write(f"--- thread {names.get(ident, ident)}\n{''.join(traceback.format_stack(frame))}\n")
        except OSError:
            stacks = None
        write_fault(self.logs, kind, text, stacks)
        logger.error("stopping the run: %s", text)
        for result in culprits:
            kill(result.process)

    def _recovered(self, text: str) -> None:
        """A fault the run survives: said on the console; the activity's time is not a healthy one (no bound grows
        from it); progress from here."""
        logger.warning("recovered: %s", text)
        self._event("recovered", text)
        self.census_due = True
        with self.lock:
            for frame in self.frames:
                frame.timed = False
            self._touch(edge=False)

    def producer_timeout(self) -> float:
        """What the producer processes get to answer: half the step bound (training/trainer/fault_hooks.py)."""
        return self.bound("step") / 2

    def _event(self, kind: str, text: str) -> None:
        try:
            append_event(self.logs / PROGRESS_FILE, {"kind": kind, "text": text, "time": time.time()})
        except OSError:
            pass

    def _beat(self, final: bool = False) -> None:
        with self.lock:
            frame = self.frames[-1]
            # the guardian's bound: this one, plus two missed beats
            stale_after = self.bound(frame.kind) + 2 * HEARTBEAT_SECONDS
            state = {"pid": os.getpid(), "time": time.time(), "bound": self.bound(frame.kind),
                     "stale_after": stale_after, "activity": frame.label, "done": final}
        path = self.logs / HEARTBEAT_FILE
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
        except OSError:
            pass
