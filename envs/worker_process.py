"""A child Python process that runs one generator function on pickled requests, over its own stdin/stdout pipes.

Used to produce items ahead of time (envs.producer) and to isolate scorers that may hang (envs.isolation). We use a
plain subprocess rather than multiprocessing so that the child's environment (PYTHONHASHSEED=0) is explicit, and so that
no `__main__` module is re-imported in the child.

Protocol: each frame is an 8-byte little-endian length and a pickle. The child first sends ("ready", None) once its
imports are done; then for every request any number of ("item", value) frames, then ("end", None), or ("error", text)
if the function raised.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import struct
import subprocess
import sys
import traceback
from typing import Any

_HEADER = struct.Struct("<Q")


def _write_frame(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exact(fd: int, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError("worker process closed its pipe")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(fd: int) -> Any:
    (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    return pickle.loads(_read_exact(fd, size))


class WorkerProcess:
    """Handle on one child process running `module:function` (a generator function taking one request)."""

    def __init__(self, target: str, env: dict[str, str] | None = None):
        child_env = {**os.environ, **(env or {})}
        self.target = target
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "envs.worker_process", target],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env, bufsize=0,
        )
        self._out = self._proc.stdout.fileno()
        self._ready = False

    def send(self, request: Any) -> None:
        """Sends one request; the child answers with item frames and an end frame."""
        _write_frame(self._proc.stdin.fileno(), request)

    def _receive(self, timeout: float | None = None) -> tuple[str, Any]:
        if timeout is not None and not select.select([self._out], [], [], timeout)[0]:
            raise TimeoutError(f"no answer from {self.target} within {timeout:.1f} s")
        return _read_frame(self._out)

    def wait_ready(self, timeout: float = 300.0) -> None:
        """Waits for the child's ready frame, so that start-up time is never mistaken for a hang."""
        kind, _ = self._receive(timeout)
        if kind != "ready":
            raise RuntimeError(f"{self.target}: expected a ready frame, got {kind!r}")
        self._ready = True

    def receive(self, timeout: float | None = None) -> tuple[str, Any]:
        """Returns the next (kind, value) frame after the ready frame; TimeoutError if none arrives in `timeout` s."""
        if not self._ready:
            self.wait_ready()
        return self._receive(timeout)

    @property
    def ready(self) -> bool:
        """True once the child's ready frame has arrived: its imports are done."""
        return self._ready

    def alive(self) -> bool:
        return self._proc.poll() is None

    @property
    def pid(self) -> int:
        return self._proc.pid

    def exit_code(self) -> int | None:
        """The child's exit status (negative: the signal that ended it), None while it runs."""
        return self._proc.poll()

    def terminate(self) -> None:
        """Kills the child without reaping it: whoever reads its pipe sees the end and cleans up."""
        if self._proc.poll() is None:
            self._proc.kill()

    def kill(self) -> None:
        """Kills the child at once (it may be stuck in C code) and reaps it."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            pipe.close()

    def close(self) -> None:
        """Asks the child to exit by closing its stdin; kills it if it does not within 5 s."""
        if self._proc.poll() is None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


def _serve(target: str) -> None:
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    protocol_out = os.dup(1)
    os.dup2(2, 1)  # anything the task code prints goes to stderr, never into the protocol pipe
    sys.stdout = sys.stderr
    protocol_in = sys.stdin.fileno()
    _write_frame(protocol_out, ("ready", None))
    while True:
        try:
            request = _read_frame(protocol_in)
        except EOFError:
            return
        try:
            for value in function(request):
                _write_frame(protocol_out, ("item", value))
            _write_frame(protocol_out, ("end", None))
        except Exception:
            _write_frame(protocol_out, ("error", traceback.format_exc()))


if __name__ == "__main__":
    _serve(sys.argv[1])
