"""The activities of a training run and how long each may go without progress (env.watchdog).

A run is, in turn: its start-up, steps, and inside a step (or before the first) a checkpoint save or a validation.
`Activities` keeps that stack of frames and the slowest healthy duration of each kind, and gives the bound: the
seconds without progress after which the current activity is hung (training/trainer/watchdog.py acts on it).
- `max(min_seconds, factor x the slowest healthy step so far)`; saves and validations keep their own slowest (a save
  is not a step);
- the first step is a warm-up (imports in the scoring processes, first allocations: often several times a later
  step) and stands in only until the second is measured;
- before the first of a kind: `first_seconds`, by default `factor x` the start-up time (Ray start to workers ready);
  the start-up itself: `startup_seconds`;
- an activity during which something failed or was recovered is no healthy one (`untime`);
- a process replaced during an activity (a restarted reward worker, a fresh producer child) warms up as the run's
  first processes did (its imports, its scoring children): until that activity ends its bound is the first-step one
  (`warm_up`), not a multiple of warm steps (on a loaded machine Ray's restart alone outlasted 3 warm steps).
Not thread-safe: the watchdog holds its lock around every call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


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
class Frame:
    kind: str  # start-up, step, save, validation, shutdown
    label: str  # what the console calls it: "step 3", "the checkpoint save of step 4"
    started: float
    nested: float = 0.0  # seconds of nested frames (a save, a validation) inside a step
    timed: bool = True  # its duration counts as a healthy instance of its kind


class Activities:
    """The run's current activity (innermost last) and the slowest healthy duration of each kind."""

    def __init__(self, settings: WatchdogSettings):
        self.settings = settings
        self.began = time.monotonic()
        self.frames = [Frame("start-up", "start-up", self.began, timed=False)]
        self.startup: float | None = None  # seconds from start to workers ready
        self.slowest: dict[str, float] = {}
        self.steps_timed = 0
        self.warming = False  # a process was replaced during the current activity

    @property
    def current(self) -> Frame:
        return self.frames[-1]

    def ready(self) -> None:
        """Workers are up: the start-up time is known; until the first step begins, the first-step bound holds."""
        self.startup = time.monotonic() - self.began
        self.replace(Frame("step", "the time before step 1", time.monotonic(), timed=False))

    def replace(self, frame: Frame) -> None:
        """Ends every frame (recording the healthy ones) and begins `frame`."""
        while len(self.frames) > 1:
            self.frames[-2].nested += self._record(self.frames.pop())
        self._record(self.frames[0])
        self.frames, self.warming = [frame], False

    def enter(self, kind: str, label: str) -> None:
        self.frames.append(Frame(kind, label, time.monotonic()))

    def leave(self) -> None:
        if len(self.frames) > 1:
            frame = self.frames.pop()
            self.frames[-1].nested += self._record(frame)

    def untime(self) -> None:
        """Something failed or was recovered: no frame open now is a healthy instance of its kind."""
        for frame in self.frames:
            frame.timed = False

    def warm_up(self) -> None:
        """A process was replaced: it is no healthy activity, and until it ends the first-step bound holds."""
        self.untime()
        self.warming = True

    def _record(self, frame: Frame) -> float:
        """Keeps the slowest healthy duration of the frame's kind. The first step is a warm-up (imports in the
        scoring processes, first allocations: often several times a later step): it stands in only until the
        first step after it is measured."""
        seconds = time.monotonic() - frame.started
        if frame.timed:
            healthy = seconds - frame.nested
            if frame.kind == "step":
                self.steps_timed += 1
            if frame.kind == "step" and self.steps_timed <= 2:
                self.slowest["step"] = healthy
            else:
                self.slowest[frame.kind] = max(self.slowest.get(frame.kind, 0.0), healthy)
        return seconds

    def bound(self, kind: str | None = None) -> float:
        """Seconds without progress after which the current activity (or `kind`) is hung."""
        settings = self.settings
        kind = kind or self.frames[-1].kind
        if kind == "start-up":
            return settings.startup_seconds
        if kind in self.slowest and not self.warming:
            return max(settings.min_seconds, settings.factor * self.slowest[kind])
        first = settings.first_seconds or settings.factor * (self.startup or settings.startup_seconds)
        return max(settings.min_seconds, first, settings.factor * self.slowest.get("step", 0.0))

    def explain_bound(self, kind: str) -> str:
        settings = self.settings
        if kind == "start-up":
            return f"env.watchdog.startup_seconds={settings.startup_seconds:g}"
        if self.warming:
            return self._explain_first("while a process replaced in this activity warms up")
        if kind in self.slowest:
            return (f"{settings.factor:g} x the slowest {kind} so far, {self.slowest[kind]:.1f} s; "
                    f"at least env.watchdog.min_seconds={settings.min_seconds:g}")
        return self._explain_first(f"before the first {kind} completes")

    def _explain_first(self, when: str) -> str:
        settings = self.settings
        if settings.first_seconds:
            return f"env.watchdog.first_seconds={settings.first_seconds:g} {when}"
        return (f"{settings.factor:g} x the start-up time, {self.startup or 0:.0f} s, {when}; "
                f"at least env.watchdog.min_seconds={settings.min_seconds:g}")
