"""Producing stream items ahead of time in child processes started with PYTHONHASHSEED=0.

Two reasons to generate outside the consuming process: slow generators (games mixes make ~20 items/s) must not stall
a training step, and a few generators depend on PYTHONHASHSEED, which only a freshly started process can fix.
The stream asks for positions ahead (`prefetch`) and collects them in order (`get`); a request is keyed by its
position and config, so a curriculum change simply makes the stream ask for the new config.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any, Hashable, Iterator

from envs.generation import generate_entry
from envs.worker_process import WorkerProcess


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
        except (EOFError, OSError, TimeoutError, RuntimeError):
            self.owner._fail_all(self, "producer process failed to start")
            return
        finally:
            self.ready.set()
        while True:
            try:
                kind, value = self.process.receive()
            except (EOFError, OSError):
                self.owner._fail_all(self, "producer process exited")
                return
            self.owner._deliver(self, kind, value)


class Producer:
    """A pool of generator processes with results held by key until the stream collects them."""

    def __init__(self, processes: int):
        if processes < 1:
            raise ValueError(f"a Producer needs at least one process, got {processes}")
        self._cond = threading.Condition()
        self._results: dict[Hashable, Any] = {}
        self._requested: set[Hashable] = set()
        self._workers = [_Worker(self) for _ in range(processes)]

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
            worker = min(self._workers, key=lambda w: len(w.in_flight))
            worker.in_flight.append(key)
        worker.outbox.put((key, args))

    def get(self, key: Hashable, args: tuple) -> dict[str, Any]:
        """Returns the entry for `key`, asking for it first if needed; raises RuntimeError if its generation failed."""
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
            if kind == "item":
                key, entry = value
                self._results[key] = entry
            elif kind == "end":
                worker.in_flight.popleft()
            else:
                key = worker.in_flight.popleft()
                self._results[key] = RuntimeError(f"generating stream item {key} failed in the producer:\n{value}")
            self._cond.notify_all()

    def _fail_all(self, worker: _Worker, reason: str) -> None:
        with self._cond:
            while worker.in_flight:
                self._results[worker.in_flight.popleft()] = RuntimeError(reason)
            self._cond.notify_all()

    def close(self) -> None:
        """Stops the feeding threads and kills the child processes (they hold nothing worth waiting for)."""
        for worker in self._workers:
            worker.outbox.put(None)
            worker.process.kill()
