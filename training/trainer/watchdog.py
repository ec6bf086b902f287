"""Hangs are faults: a run that stops making progress is stopped, or recovered, within a bound taken from the run.

A thread in the trainer's process (Ray's task runner) watches the time since the run last made progress. Progress is
a step, a checkpoint save or a validation beginning or ending, one of verl's phases of a step ending (gen,
old_log_prob, update_actor, update_weights, ... as they appear in its timing dict), a rollout session starting or
ending (the replay buffer's view of TransferQueue), or a producer process being replaced. So a step that is slow but
moving never trips it; a stall does.

The bound is the current activity's (training/trainer/activity.py): a multiple of the slowest healthy step (save,
validation) so far, with floors.

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
import threading
import time
from pathlib import Path

from training.trainer.activity import Activities, Frame, WatchdogSettings
from training.trainer.diagnosis import Diagnosis, describe, waiting_in, write_stacks
from training.trainer.processes import kill
from training.trainer.progress import HEARTBEAT_FILE, PROGRESS_FILE, append_event, write_fault

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 2.0
PING_SECONDS = 10.0  # how long a process may take to answer once the bound has passed
CENSUS_SECONDS = 5.0  # how long the census at each step waits for pids (a busy one answers at a later step)
CENSUS_RETRY_SECONDS = 15.0
GRACE_SECONDS = 10.0  # after a fault, how long verl may take to unwind before the process ends itself


class Watchdog:
    """Called from the trainer's thread at each activity's edges; watches from its own thread."""

    def __init__(self, trainer, settings: WatchdogSettings, logs_dir: Path):
        self.trainer, self.settings, self.logs = trainer, settings, Path(logs_dir)
        self.lock = threading.Lock()
        self.activities = Activities(settings)
        self.last_progress = time.monotonic()
        self.signature, self.seen, self.recount, self.producer_hangs = None, 0, False, 0
        self.probes = 0  # probes of the current stall
        self.faulted_at: float | None = None
        self.resting = False  # training is over and succeeded: nothing to watch
        self.done = threading.Event()
        self.trainer_thread = threading.get_ident()
        self.diagnosis = Diagnosis(trainer)
        self.census_due = False  # learn the processes' pids while they answer (a stopped one cannot tell)
        self.census_next = 0.0

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
            self.activities.ready()
            self._touch()

    def step_begin(self, step: int) -> None:
        # new processes (agent loop workers, restarted reward workers) since the last census: asked at once
        self.census_due, self.census_next = True, 0.0
        with self.lock:
            self.activities.replace(Frame("step", f"step {step}", time.monotonic()))
            self._touch()

    def enter(self, kind: str, label: str) -> None:
        with self.lock:
            self.activities.enter(kind, label)
            self._touch()

    def leave(self) -> None:
        with self.lock:
            self.activities.leave()
            self._touch()

    def finish(self, failed: bool) -> None:
        """fit ended: after a success verl's tear-down (a logger's upload, say) is not watched; after a failure it
        gets GRACE_SECONDS, then the process ends (its fault is recorded)."""
        with self.lock:
            if failed:
                self.activities.untime()
            self.activities.replace(Frame("shutdown", "the trainer's shutdown", time.monotonic(), timed=False))
            self._touch()
            if failed and self.faulted_at is None:
                self.faulted_at = time.monotonic()
            self.resting = not failed

    def stop(self) -> None:
        """The task runner returned: nothing more to watch; the heartbeat says so."""
        self.done.set()
        self._beat(final=True)

    def _touch(self, edge: bool = True) -> None:
        """Progress now; at an activity's edge the replay buffer's tables are counted afresh."""
        self.last_progress, self.probes = time.monotonic(), 0
        self.recount = self.recount or edge

    def bound(self, kind: str | None = None) -> float:
        """Seconds without progress after which the current activity (or `kind`) is hung."""
        return self.activities.bound(kind or self.activities.current.kind)

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
            frame, stalled = self.activities.current, now - self.last_progress
            bound = self.bound(frame.kind)
        if self.census_due and stalled < bound / 2 and now >= self.census_next:
            self.census_next = now + CENSUS_RETRY_SECONDS  # a process that did not answer is asked again later
            self.census_due, restarted = self.diagnosis.census(CENSUS_SECONDS)
            if restarted:  # Ray restarted a process during this activity: not a healthy one; it warms up
                with self.lock:
                    self.activities.warm_up()
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

    def _diagnose(self, frame: Frame, stalled: float, bound: float) -> None:
        """Acts on the culprits of a stall (training/trainer/diagnosis.py): a dead process stops the run; a stopped
        or idle restartable one is restarted; any other culprit stops the run. With no culprit it waits: one more
        bound when every process answers, two when one is silent but computing (a slow step on a loaded machine)."""
        found = self.diagnosis.examine(PING_SECONDS)
        head = (f"{frame.label} made no progress for {stalled:.0f} s (bound {bound:.0f} s = "
                f"{self.activities.explain_bound(frame.kind)})")
        if found.dead:
            self._stop("dead", f"{head}; dead: {describe(found.dead)}", found.dead + found.culprits)
        elif found.culprits and all(p.process.restartable for p in found.culprits):
            self.diagnosis.restart(found.culprits)
            self._recovered(f"{describe(found.culprits)}: hung ({head}); restarted by Ray, its calls retried "
                            "(nothing lost)")
        elif found.culprits:
            self._stop("hung", f"{head}; hung: {describe(found.culprits)}", found.culprits)
        elif stalled > (3 if found.busy else 2) * bound:
            self._stop("hung", f"{head}; no process is stopped, dead or idle"
                       + (f" ({describe(found.busy)})" if found.busy else ", every one answers")
                       + f"; the trainer waits in {waiting_in(self.trainer_thread)}", [])
        else:
            logger.warning("%s; no process is stopped, dead or idle%s: waiting", head,
                           f" ({describe(found.busy)})" if found.busy else "")

    def _stop(self, kind: str, text: str, culprits: list) -> None:
        self.faulted_at = time.monotonic()
        with self.lock:
            self.activities.untime()
        stacks = write_stacks(self.logs / f"hang-{os.getpid()}.txt", text)
        write_fault(self.logs, kind, text, stacks)
        logger.error("stopping the run: %s", text)
        for result in culprits:
            kill(result.process)

    def _recovered(self, text: str) -> None:
        """A fault the run survives: said on the console; the activity's time is not a healthy one (no bound grows
        from it) and the replacement warms up under the first-step bound; progress from here."""
        logger.warning("recovered: %s", text)
        self._event("recovered", text)
        self.census_due = True
        with self.lock:
            self.activities.warm_up()
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
            frame = self.activities.current
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
