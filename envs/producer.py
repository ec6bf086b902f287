"""Producing stream items ahead of time in child processes started with PYTHONHASHSEED=0.

Two reasons to generate outside the consuming process: slow generators (games mixes make ~20 items/s) must not stall
a training step, and a few generators depend on PYTHONHASHSEED, which only a freshly started process can fix.
The stream asks for positions ahead (`prefetch`) and collects them in order (`get`); a request is keyed by its
position and config, so a curriculum change simply makes the stream ask for the new config.

A child that dies (killed, out of memory, a crash in C code) or hangs (no answer for `timeout_s`: it is killed) is
replaced by a fresh one, which gets the requests the lost one had not answered: generation is deterministic, so
nothing is lost. A request that loses two children (a generator that crashes or hangs every time) fails alone with
GenerationFailed, which the stream counts and skips. Too many replacements in all (MAX_RESPAWNS) stop the stream
with a RuntimeError that says so. The trainer sets `timeout_s` from its step bound (training/trainer/fault_hooks.py).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, deque
from typing import Any, Callable, Hashable, Iterator

from envs.generation import generate_entry
from envs.worker_process import WorkerProcess

log = logging.getLogger(__name__)

GENERATION_TIMEOUT_S = 300.0  # a request unanswered this long is a hang (games items take well under a second)
MAX_DEATHS_PER_ITEM = 2  # a request whose generation lost this many children (died or hung) fails alone
MAX_RESPAWNS = 20  # children replaced over a stream's life before it stops with an error


class GenerationFailed(RuntimeError):
    """One item could not be generated (its generator raised, hung, or killed its process): skip and count it."""


def _generate(request: tuple[Hashable, tuple]) -> Iterator[tuple[Hashable, dict]]:
    """Child side: one (key, generate_entry args) request -> one (key, entry) item."""
    key, args = request
    yield key, generate_entry(*args)


class _Worker:
    """One child process plus the threads that feed it and read from it without blocking the stream."""

    def __init__(self, owner: Producer):
        self.owner = owner
        self.process = WorkerProcess("envs.producer:_generate", env={"PYTHONHASHSEED": "0"})
        self.in_flight: deque[Hashable] = deque()
        self.outbox: queue.Queue = queue.Queue()
        self.ready = threading.Event()
        self.last_progress = time.monotonic()  # when the oldest in-flight request started waiting, or a frame came
        self.hung: Hashable | None = None  # the request the watchdog killed this child for
        threading.Thread(target=self._send_forever, daemon=True, name="producer-send").start()
        threading.Thread(target=self._read_forever, daemon=True, name="producer-read").start()

    def _send_forever(self) -> None:
        while (request := self.outbox.get()) is not None:
            try:
                self.process.send(request)
            except OSError:
                return

    def _read_forever(self) -> None:
        try:
            self.process.wait_ready()
        except (EOFError, OSError, TimeoutError, RuntimeError) as err:
            self.owner._fail_all(self, f"a producer process failed to start ({type(err).__name__}: {err})")
            return
        finally:
            self.ready.set()
        while True:
            try:
                kind, value = self.process.receive()
            except (EOFError, OSError):
                self.owner._replace(self)
                return
            self.owner._deliver(self, kind, value)


class Producer:
    """A pool of generator processes with results held by key until the stream collects them."""

    def __init__(self, processes: int, timeout_s: float = GENERATION_TIMEOUT_S,
                 on_respawn: Callable[[bool], None] | None = None):
        """`on_respawn(hung)` is called (in a reader thread) each time a child is replaced, as it happens: the stream
        counts it at once, not at its next item, so a step's metrics show a death or hang during that step."""
        if processes < 1:
            raise ValueError(f"a Producer needs at least one process, got {processes}")
        self.timeout_s = timeout_s
        self.respawns = 0  # children replaced after they died or hung
        self._on_respawn = on_respawn
        self._cond = threading.Condition()
        self._results: dict[Hashable, Any] = {}
        self._requested: set[Hashable] = set()
        self._args: dict[Hashable, tuple] = {}  # unanswered requests, sent again to a replacement child
        self._deaths: Counter = Counter()  # children lost while generating each request
        self._closed = False
        self._workers = [_Worker(self) for _ in range(processes)]
        threading.Thread(target=self._watch, daemon=True, name="producer-watchdog").start()

    def wait_ready(self) -> None:
        """Blocks until every child process has imported its modules (seconds; do it while other things load)."""
        for worker in self._workers:
            worker.ready.wait()

    def prefetch(self, key: Hashable, args: tuple) -> None:
        """Asks for generate_entry(*args) under `key` unless it was already asked for."""
        with self._cond:
            if key in self._requested:
                return
            self._requested.add(key)
            self._args[key] = args
            worker = min(self._workers, key=lambda w: len(w.in_flight))
            if not worker.in_flight:
                worker.last_progress = time.monotonic()
            worker.in_flight.append(key)
        worker.outbox.put((key, args))

    def get(self, key: Hashable, args: tuple) -> dict[str, Any]:
        """Returns the entry for `key`, asking for it first if needed; raises GenerationFailed if this item could not
        be generated, RuntimeError if the producer itself cannot go on."""
        self.prefetch(key, args)
        with self._cond:
            while key not in self._results:
                self._cond.wait()
            self._requested.discard(key)
            value = self._results.pop(key)
        if isinstance(value, Exception):
            raise value
        return value

    def discard(self, keep) -> None:
        """Forgets delivered results whose key fails `keep(key)` (e.g. positions already passed)."""
        with self._cond:
            for key in [k for k in self._results if not keep(k)]:
                del self._results[key]
                self._requested.discard(key)

    def _deliver(self, worker: _Worker, kind: str, value: Any) -> None:
        with self._cond:
            worker.last_progress = time.monotonic()
            if kind == "item":
                key, entry = value
                self._results[key] = entry
            elif kind == "end":
                self._args.pop(worker.in_flight.popleft(), None)
            else:
                key = worker.in_flight.popleft()
                self._args.pop(key, None)
                self._results[key] = GenerationFailed(f"generating stream item {key} failed in the producer:\n{value}")
            self._cond.notify_all()

    def _replace(self, worker: _Worker) -> None:
        """A child died or hung: a fresh one takes over its unanswered requests; the one it was generating fails
        alone after MAX_DEATHS_PER_ITEM lost children."""
        with self._cond:
            if self._closed or worker not in self._workers:
                return
            lost = list(worker.in_flight)
            worker.in_flight.clear()
            if lost:
                head = lost[0]
                self._deaths[head] += 1
                if self._deaths[head] >= MAX_DEATHS_PER_ITEM:
                    why = (f"hung for more than {self.timeout_s:g} s in {MAX_DEATHS_PER_ITEM} producer processes"
                           if worker.hung == head else f"lost {MAX_DEATHS_PER_ITEM} producer processes")
                    self._results[head] = GenerationFailed(f"stream item {head}: its generator {why}; skipped")
                    self._args.pop(head, None)
                    lost = lost[1:]
            self.respawns += 1
            if self._on_respawn is not None:
                self._on_respawn(worker.hung is not None)
            if self.respawns > MAX_RESPAWNS:
                for key in lost:
                    self._results[key] = RuntimeError(
                        f"producer processes died {self.respawns} times (last exit code {worker.process.exit_code()}); "
                        "the machine may be out of memory (see `dmesg`); resume the run from its last checkpoint")
                self._cond.notify_all()
                return
            log.warning("a producer process %s with %d requests unanswered; replaced (%d so far)",
                        "hung" if worker.hung is not None else f"died (exit code {worker.process.exit_code()})",
                        len(lost), self.respawns)
            fresh = _Worker(self)
            fresh.in_flight.extend(lost)
            self._workers[self._workers.index(worker)] = fresh
            for key in lost:
                fresh.outbox.put((key, self._args[key]))
            worker.outbox.put(None)
            self._cond.notify_all()
        worker.process.kill()  # reaps it and closes its pipes

    def _watch(self) -> None:
        """Kills a child whose oldest request has waited more than timeout_s (its reader then replaces it)."""
        while not self._closed:
            time.sleep(min(1.0, self.timeout_s / 4))
            with self._cond:
                stuck = [w for w in self._workers if w.in_flight and w.ready.is_set() and w.hung is None
                         and time.monotonic() - w.last_progress > self.timeout_s]
                for worker in stuck:
                    worker.hung = worker.in_flight[0]
            for worker in stuck:
                log.warning("stream item %s: no answer from its producer process for more than %g s (hung); "
                            "killing it", worker.hung, self.timeout_s)
                worker.process.terminate()  # SIGKILL (a stopped process too); its reader then replaces it

    def _fail_all(self, worker: _Worker, reason: str) -> None:
        with self._cond:
            while worker.in_flight:
                self._results[worker.in_flight.popleft()] = RuntimeError(reason)
            self._cond.notify_all()

    def close(self) -> None:
        """Stops the feeding threads and kills the child processes (they hold nothing worth waiting for)."""
        with self._cond:
            self._closed = True
            workers = list(self._workers)
        for worker in workers:
            worker.outbox.put(None)
            worker.process.kill()
