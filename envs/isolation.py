"""Scoring in a child process, so that a scorer that hangs costs one response's score and nothing else.

Requests from any thread (or from asyncio via `score_async`) queue up; one dispatcher thread sends everything pending
as one batch to the child, which scores item by item under a SIGALRM timer (stops Python-level hangs and keeps the
process) and streams results back in chunks. If the child falls silent for longer than the timeout (a hang in C code),
it is killed; results already received are kept, and the unanswered items are replayed one at a time in a fresh child,
so exactly the hanging item scores 0 with the reason "scorer hung ...".
"""

from __future__ import annotations

import asyncio
import atexit
import signal
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict
from typing import Any, Iterator

from envs.reward import RewardOptions, score_response
from envs.worker_process import WorkerProcess

_CHUNK_SECONDS = 0.05  # the child sends what it has scored at least this often
_GRACE_SECONDS = 2.0  # extra silence allowed beyond the per-item timeout before the child is killed


class _ScoreTimeout(BaseException):
    """Raised by SIGALRM inside the child; BaseException so that no scorer's `except Exception` swallows it."""


def _on_alarm(signum, frame):
    raise _ScoreTimeout()


def _failed(request: dict[str, Any], reason: str) -> dict[str, Any]:
    result = score_response("", request["entry"], request.get("task"), RewardOptions(**request["options"]))
    result["reason"] = reason
    return result


def _score_batch(requests: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Child side: scores each request under a timer; yields lists of results at least every _CHUNK_SECONDS."""
    signal.signal(signal.SIGALRM, _on_alarm)
    chunk, last_sent = [], time.monotonic()
    for request in requests:
        options = RewardOptions(**request["options"])
        signal.setitimer(signal.ITIMER_REAL, options.timeout_s)
        try:
            result = score_response(request["response"], request["entry"], request.get("task"), options,
                                    request.get("config"), request.get("response_length"))
        except _ScoreTimeout:
            result = _failed(request, f"scorer timed out after {options.timeout_s} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        chunk.append(result)
        if time.monotonic() - last_sent >= _CHUNK_SECONDS:
            yield chunk
            chunk, last_sent = [], time.monotonic()
    if chunk:
        yield chunk


class IsolatedScorer:
    """A child scoring process and the dispatcher thread that feeds it batches."""

    def __init__(self):
        self._pending: list[tuple[dict[str, Any], Future]] = []
        self._lock = threading.Condition()
        self._child: WorkerProcess | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._dispatch_forever, name="isolated-scorer", daemon=True)
        self._thread.start()

    def submit(self, response: Any, entry: dict[str, Any], task: str | None = None,
               options: RewardOptions = RewardOptions(), config: dict[str, Any] | None = None,
               response_length: int | None = None) -> Future:
        """Queues one response; the Future resolves to score_response's dict."""
        request = {"response": response, "entry": entry, "task": task, "options": asdict(options),
                   "config": config, "response_length": response_length}
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("IsolatedScorer is closed")
            self._pending.append((request, future))
            self._lock.notify()
        return future

    def score_many(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Scores a list of submit() keyword dicts; returns results in order."""
        return [f.result() for f in [self.submit(**r) for r in requests]]

    def _dispatch_forever(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                batch, self._pending = self._pending, []
            try:
                results = self._run(batch)
            except BaseException as exc:  # never leave a caller waiting
                results = [_failed(request, f"isolation failed: {exc!r}") for request, _ in batch]
            for (_, future), result in zip(batch, results):
                future.set_result(result)

    def _run(self, batch: list[tuple[dict[str, Any], Future]]) -> list[dict[str, Any]]:
        requests = [request for request, _ in batch]
        results = self._run_in_child(requests)
        # The child hung in C code and was killed. Items it finished but had not sent yet are unknown, so the rest are
        # replayed one per request: cheap (a pipe round trip each), and only a hanging item costs another kill.
        for request in requests[len(results):]:
            results.extend(self._run_in_child([request]) or [_failed(
                request, f"scorer hung and was killed after {request['options']['timeout_s']} s")])
        return results

    def _run_in_child(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._child is None or not self._child.alive():
            self._child = WorkerProcess("envs.isolation:_score_batch", env={"PYTHONHASHSEED": "0"})
            self._child.wait_ready()
        silence = max(r["options"]["timeout_s"] for r in requests) + _GRACE_SECONDS
        self._child.send(requests)
        results: list[dict[str, Any]] = []
        while True:
            try:
                kind, value = self._child.receive(timeout=silence)
            except (TimeoutError, EOFError):
                self._child.kill()
                self._child = None
                return results
            if kind == "item":
                results.extend(value)
            elif kind == "end":
                return results
            else:  # the child raised outside a scorer: score the rest 0 with its traceback
                return results + [_failed(r, f"scoring process error: {value[-300:]}") for r in requests[len(results):]]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join(timeout=5)
        if self._child is not None:
            self._child.close()


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


async def score_async(**request: Any) -> dict[str, Any]:
    """Awaitable form of IsolatedScorer.submit for verl's async reward loop."""
    return await asyncio.wrap_future(shared_scorer().submit(**request))
