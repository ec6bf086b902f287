"""Who stalled a run: the run's processes asked for their pids while they answer, and examined when it stalls.

The watchdog (training/trainer/watchdog.py) decides when; this module says who. A stopped process cannot tell its
pid, so `census` asks every process while the run moves (at each step, until each has answered) and notices a
restartable one that Ray restarted (its pid changed). `examine` probes them all (training/trainer/processes.py) and
sorts the answers: the dead; the culprits (stopped, or silent and idle while nothing computes); the busy (silent
but computing, or restarting). A reward worker the watchdog restarted is restarting, not a culprit, until it answers.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from training.trainer.processes import ALIVE, DEAD, SILENT, Probe, kill, probe, run_processes

logger = logging.getLogger(__name__)


@dataclass
class Findings:
    """A stall's probe, sorted."""

    dead: list[Probe] = field(default_factory=list)
    culprits: list[Probe] = field(default_factory=list)  # stopped, or silent and idle while nothing computes
    busy: list[Probe] = field(default_factory=list)  # silent but computing, or restarting: given more time


class Diagnosis:
    """The run's processes as the watchdog knows them: pids learned while they answered, restarts in progress."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.known: dict[str, tuple[int | None, bool]] = {}  # role -> (pid, local), from earlier answers
        self.restarting: set[str] = set()  # roles restarted here that have not answered since

    def census(self, timeout: float) -> tuple[bool, bool]:
        """Asks the processes whose pid is unknown, and the restartable ones (a restart changes it), for their pid.
        Returns (one did not answer: ask again later, one answered with a new pid: Ray restarted it unasked)."""
        processes = [p for p in run_processes(self.trainer) if p.role not in self.known or p.restartable]
        unanswered = restarted = False
        for result in probe(processes, timeout) if processes else []:
            role = result.process.role
            if result.state != ALIVE:
                unanswered = True
                continue
            # a restart ordered here was counted when it was ordered (its activity warms up then); its new pid, learned
            # steps later, is no second restart (CI, 75ac890: counted again, it raised a later step's bound 10-fold)
            ordered = role in self.restarting
            self.restarting.discard(role)
            if self.known.get(role, (None,))[0] not in (None, result.process.pid) and not ordered:
                logger.warning("%s was restarted (pid %s -> %s)", role, self.known[role][0], result.process.pid)
                restarted = True
            self.known[role] = (result.process.pid, result.process.local)
        return unanswered, restarted

    def examine(self, timeout: float) -> Findings:
        """Probes every process of the run (pids from the census for the silent ones) and sorts the answers."""
        processes = run_processes(self.trainer)
        for process in processes:
            process.pid, process.local = self.known.get(process.role, (None, False))
        probes = probe(processes, timeout)
        for result in probes:
            if result.process.pid:
                self.known[result.process.role] = (result.process.pid, result.process.local)
        silent = [p for p in probes if p.state == SILENT]
        for result in silent:
            if result.process.role in self.restarting:
                result.busy, result.stopped, result.detail = True, False, "restarting"
        busy = [p for p in silent if p.busy]
        return Findings(dead=[p for p in probes if p.state == DEAD], busy=busy,
                        culprits=[p for p in silent if p.stopped or not busy and not p.busy])

    def restart(self, culprits: list[Probe]) -> None:
        """Kills restartable culprits: Ray restarts them and retries their calls."""
        for result in culprits:
            kill(result.process)
            self.restarting.add(result.process.role)


def describe(probes: list[Probe]) -> str:
    return "; ".join(p.describe() for p in probes)


def waiting_in(thread_ident: int) -> str:
    """The thread's innermost calls in verl, TransferQueue or this project (where the trainer is blocked)."""
    frame = sys._current_frames().get(thread_ident)
    calls = [f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_stack(frame)
             if any(part in f.filename for part in ("/verl/", "/training/", "/envs/", "/transfer_queue/"))]
    return " > ".join(calls[-4:]) or "an unknown place"


def write_stacks(path: Path, text: str) -> Path | None:
    """Writes `text` and every thread's stack to `path` (the hang's "traceback"); None if it cannot."""
    try:
        with open(path, "w") as out:
            out.write(text + "\n\n")
            names = {thread.ident: thread.name for thread in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                out.write(f"--- thread {names.get(ident, ident)}\n{''.join(traceback.format_stack(frame))}\n")
        return path
    except OSError:
        return None
