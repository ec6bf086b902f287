"""Scoring in child processes, so that a scorer that hangs costs one response's score and nothing else.

Requests from any thread (or from asyncio via `score_async`) queue up; a dispatcher thread takes everything pending,
splits it over the child processes (they score in parallel) and sends each its share as one frame, with the reward
options once per frame. A child scores item by item under a SIGALRM timer (stops Python-level hangs and keeps the
process) and sends compact result tuples back in chunks. If a child falls silent for longer than the timeout (a hang in
C code), it is killed; results already received are kept, and its unanswered items are replayed one per request in a
fresh child, so exactly the hanging item scores 0 with the reason "scorer hung ...".

Starting the children costs their Reasoning Gym import (35-46 s seen on step 1 of a loaded machine, and after every
resume). `warm_up()` starts them in the background, on the dispatcher thread, so that a request arriving meanwhile just
queues behind the start instead of starting children of its own; envs.verl_reward calls it when verl imports it.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import signal
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any, Iterator

from envs.reward import RESULT_FIELDS, RewardOptions, length_key, score_response, zero_result
from envs.worker_process import WorkerProcess

log = logging.getLogger(__name__)

_CHUNK_SECONDS = 0.05  # a child sends what it has scored at least this often
_GRACE_SECONDS = 2.0  # extra silence allowed beyond the per-item timeout before a child is killed

# One request as it crosses the pipe: (response, entry, task, config, response_length, prompt_opens_think).
Request = tuple[Any, dict, "str | None", "dict | str | None", "int | None", bool]


class _ScoreTimeout(BaseException):
    """Raised by SIGALRM inside the child; BaseException so that no scorer's `except Exception` swallows it."""


def _on_alarm(signum, frame):
    raise _ScoreTimeout()


def _failed(request: Request, reason: str) -> dict[str, Any]:
    """A zero result for a request that could not be scored; never raises, whatever the request holds."""
    entry = request[1] if isinstance(request[1], dict) else {}
    metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
    return zero_result(request[2] or metadata.get("source_dataset"), reason, request[0], request[4])


def _row(result: dict[str, Any], request: Request) -> tuple:
    """A result as it crosses the pipe: RESULT_FIELDS' values, then the length (its key follows from the request)."""
    return tuple(result[field] for field in RESULT_FIELDS) + (result[length_key(request[4])],)


def _unrow(row: tuple, request: Request) -> dict[str, Any]:
    return {**dict(zip(RESULT_FIELDS, row)), length_key(request[4]): row[-1]}


def _score_frame(frame: tuple[dict, list[Request]]) -> Iterator[list[tuple]]:
    """Child side: scores each request under a timer; yields lists of result tuples at least every _CHUNK_SECONDS."""
    options_dict, requests = frame
    options = RewardOptions(**options_dict)
    signal.signal(signal.SIGALRM, _on_alarm)
    chunk, last_sent = [], time.monotonic()
    for request in requests:
        signal.setitimer(signal.ITIMER_REAL, options.timeout_s)
        try:
            result = score_response(request[0], request[1], request[2], options, request[3], request[4], request[5])
        except _ScoreTimeout:
            result = _failed(request, f"scorer timed out after {options.timeout_s} s")
        except Exception as exc:  # a malformed request (e.g. an entry without metadata) costs only its own score
            result = _failed(request, f"could not score: {type(exc).__name__}: {str(exc)[:200]}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        chunk.append(_row(result, request))
        if time.monotonic() - last_sent >= _CHUNK_SECONDS:
            yield chunk
            chunk, last_sent = [], time.monotonic()
    if chunk:
        yield chunk


class IsolatedScorer:
    """Child scoring processes and the dispatcher thread that feeds them batches."""

    def __init__(self, processes: int = 2):
        self._pending: list[tuple[Request, RewardOptions, Future]] = []
        self._lock = threading.Condition()
        self._children: list[WorkerProcess | None] = [None] * processes
        self._closed = False
        self._warm = False  # warm_up() asked for the children to be started
        self.starts = 0  # child processes started so far, restarts after a kill included
        self._thread = threading.Thread(target=self._dispatch_forever, name="isolated-scorer", daemon=True)
        self._thread.start()

    def submit(self, response: Any, entry: dict[str, Any], task: str | None = None,
               options: RewardOptions = RewardOptions(), config: dict[str, Any] | str | None = None,
               response_length: int | None = None, prompt_opens_think: bool = False) -> Future:
        """Queues one response; the Future resolves to score_response's dict."""
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("IsolatedScorer is closed")
            self._pending.append(((response, entry, task, config, response_length, bool(prompt_opens_think)), options,
                                  future))
            self._lock.notify()
        return future

    def warm_up(self) -> None:
        """Starts the child processes in the background and returns at once; idempotent, and safe alongside requests.

        The dispatcher thread starts them, so a request submitted meanwhile waits for those children, never for new ones.
        """
        with self._lock:
            if not self._closed:
                self._warm = True
                self._lock.notify()

    def ready_children(self) -> int:
        """How many child processes are running with their imports done (ready frame received)."""
        return sum(1 for child in list(self._children) if child is not None and child.ready and child.alive())

    def score_many(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Scores a list of submit() keyword dicts; returns results in order."""
        return [f.result() for f in [self.submit(**r) for r in requests]]

    def _dispatch_forever(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._warm and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                warm, self._warm = self._warm, False
                batch, self._pending = self._pending, []
            if warm:
                try:
                    self._start(range(len(self._children)))
                except BaseException as exc:  # a request will try again, and fail with the reason if it still fails
                    log.warning("isolated scorer: warm-up failed: %r", exc)
            groups: dict[RewardOptions, list[tuple[Request, Future]]] = {}
            for request, options, future in batch:
                groups.setdefault(options, []).append((request, future))
            for options, members in groups.items():
                requests = [request for request, _ in members]
                try:
                    results = self._run(options, requests)
                except BaseException as exc:  # never leave a caller waiting
                    results = [_failed(request, f"isolation failed: {exc!r}") for request in requests]
                for (_, future), result in zip(members, results):
                    future.set_result(result)

    def _start(self, indices) -> None:
        """Starts the missing or dead children among `indices` all at once, then waits until each is ready."""
        fresh = []
        for index in indices:
            child = self._children[index]
            if child is None or not child.alive():
                if child is not None:
                    child.kill()  # reaps it and closes its pipes
                self._children[index] = WorkerProcess("envs.isolation:_score_frame", env={"PYTHONHASHSEED": "0"})
                self.starts += 1
                fresh.append(index)
        for index in fresh:
            try:
                self._children[index].wait_ready()
            except BaseException:
                self._children[index].kill()
                self._children[index] = None
                raise

    def _child(self, index: int) -> WorkerProcess:
        self._start([index])
        return self._children[index]

    def _run(self, options: RewardOptions, requests: list[Request]) -> list[dict[str, Any]]:
        share = -(-len(requests) // len(self._children))
        slices = [requests[i:i + share] for i in range(0, len(requests), share)]
        frame_options = asdict(options)
        self._start(range(len(slices)))  # in parallel: a cold start costs one child's imports, not one per child
        for index, part in enumerate(slices):  # all children work at once
            self._child(index).send((frame_options, part))
        results: list[dict[str, Any]] = []
        for index, part in enumerate(slices):
            answered = self._collect(index, part, options)
            # A child hung in C code and was killed. Items it finished but had not sent yet are unknown, so the rest
            # are replayed one per request: cheap (a pipe round trip each); only a hanging item costs another kill.
            for request in part[len(answered):]:
                self._child(index).send((frame_options, [request]))
                answered += self._collect(index, [request], options) or [_failed(
                    request, f"scorer hung and was killed after {options.timeout_s} s")]
            results += answered
        return results

    def _collect(self, index: int, part: list[Request], options: RewardOptions) -> list[dict[str, Any]]:
        child, results = self._children[index], []
        while True:
            try:
                kind, value = child.receive(timeout=options.timeout_s + _GRACE_SECONDS)
            except (TimeoutError, EOFError):
                child.kill()
                self._children[index] = None
                return results
            if kind == "item":
                done = len(results)
                results += [_unrow(row, part[done + k]) for k, row in enumerate(value)]
            elif kind == "end":
                return results
            else:  # the child raised outside a scorer: score the rest 0 with its traceback
                return results + [_failed(r, f"scoring process error: {value[-300:]}") for r in part[len(results):]]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join(timeout=5)
        for child in self._children:
            if child is not None:
                child.close()


_shared: IsolatedScorer | None = None
_shared_lock = threading.Lock()


def shared_scorer() -> IsolatedScorer:
    """Returns this process's IsolatedScorer, started on first use and closed at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = IsolatedScorer()
            atexit.register(_shared.close)
        return _shared


def warm_up() -> IsolatedScorer:
    """Starts this process's scorer children in the background (see IsolatedScorer.warm_up); returns at once."""
    scorer = shared_scorer()
    scorer.warm_up()
    return scorer


async def score_async(**request: Any) -> dict[str, Any]:
    """Awaitable form of IsolatedScorer.submit for verl's async reward loop."""
    return await asyncio.wrap_future(shared_scorer().submit(**request))
