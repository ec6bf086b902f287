"""A tiny real run for the fault tests (test_fault_runs.py): its command, the process and every descendant it ever
had, the console's fault lines (the fixture that kills whatever a test started: conftest.py's run_factory)."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[3]
# hang bounds for these runs: 3 x the slowest step so far, at least 5 s (tiny steps take ~1-6 s)
FAST_WATCHDOG = ["env.watchdog.factor=3", "env.watchdog.min_seconds=5"]


def train_command(tiny_run: list[str], run_dir: Path, ckpt: Path, steps: int, save_freq: int, *overrides: str,
                  verbose: bool = True) -> tuple[list[str], dict[str, str]]:
    """Returns the command line and environment of a tiny CPU run checkpointing into `ckpt` every `save_freq` steps
    (-1: never); `verbose` puts verl's step lines (with every metric) on the console."""
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *tiny_run, "trainer.device=cpu",
           f"trainer.total_training_steps={steps}", f"trainer.save_freq={save_freq}",
           f"trainer.default_local_dir={ckpt}", f"hydra.run.dir={run_dir / 'hydra'}", "env.dump.every_steps=0",
           f"env.console={'verbose' if verbose else 'quiet'}", f"env.logs_dir={run_dir / 'logs'}",
           # the step times these bounds were set on: every step updates (an entropy bonus has a gradient on every
           # token; without it the quickstart skips the tiny model's zero-advantage groups,
           # training/zero_advantage/rules.py)
           "actor_rollout_ref.actor.entropy_coeff=0.001", *overrides]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
               CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return cmd, env


class Run:
    """One train_grpo.py process; every descendant it ever had is recorded as the test polls it."""

    def __init__(self, tiny_run: list[str], run_dir: Path, steps: int, *overrides: str, save_freq: int = -1,
                 ckpt: Path | None = None, verbose: bool = True, env: dict | None = None):
        cmd, base_env = train_command(tiny_run, run_dir, ckpt or run_dir / "ckpt", steps, save_freq, *overrides,
                                      verbose=verbose)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.dir, self.logs, self.log = run_dir, run_dir / "logs", run_dir / f"output-{time.monotonic_ns()}.log"
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=REPO, env={**base_env, **(env or {})}, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.seen: dict[tuple[int, float], str] = {}

    def poll(self) -> bool:
        """Records the descendants; True while the driver runs."""
        try:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                try:
                    key, line = (child.pid, child.create_time()), command_line(child)
                except psutil.Error:
                    continue
                # the latest command line: a process seen between fork and exec shows its parent's, and the raylet's
                # own names the session folder; an exited process shows '' (what was seen is kept)
                if line or key not in self.seen:
                    self.seen[key] = line
        except psutil.Error:
            pass
        return self.proc.poll() is None

    def wait_for(self, condition, timeout: float, what: str, period: float = 0.1) -> float:
        """Polls every `period` s until `condition()`; returns the time it became true. Fails on exit or timeout."""
        deadline = time.monotonic() + timeout
        while self.poll() and time.monotonic() < deadline:
            if condition():
                return time.monotonic()
            time.sleep(period)
        assert condition(), f"no {what} within {timeout} s (exit {self.proc.poll()}):\n{self.output()[-6000:]}"
        return time.monotonic()

    def steps(self) -> int:
        """The last step the console was told of (progress.jsonl, in either console mode)."""
        try:
            lines = (self.logs / "progress.jsonl").read_text().splitlines()
        except OSError:
            return 0
        return max([json.loads(line)["step"] for line in lines if '"kind": "step"' in line], default=0)

    def events(self, kind: str) -> list[dict]:
        try:
            lines = (self.logs / "progress.jsonl").read_text().splitlines()
        except OSError:
            return []
        return [event for event in map(json.loads, lines) if event.get("kind") == kind]

    def heartbeat(self) -> dict:
        try:
            return json.loads((self.logs / "heartbeat.json").read_text())
        except (OSError, ValueError):
            return {}

    def bound(self, step: int) -> float:
        """The watchdog's bound during `step` or a later one, from the trainer's heartbeat (beats every 2 s)."""
        def beating() -> bool:
            found = re.fullmatch(r"step (\d+)", str(self.heartbeat().get("activity")))
            return bool(found) and int(found.group(1)) >= step

        self.wait_for(beating, 600, f"a heartbeat of step {step}")
        return float(self.heartbeat()["bound"])

    def strike(self, *titles: str, sig: int = signal.SIGKILL) -> psutil.Process:
        """Sends `sig` to the first descendant whose command line matches each of `titles`, all found before the
        first is sent (a scan between two kills once let the run name the first dead before the last was killed);
        returns the first."""
        self.poll()
        children = psutil.Process(self.proc.pid).children(recursive=True)
        lines = {child.pid: command_line(child) for child in children}
        victims = []
        for title in titles:
            found = [p for p in children if re.search(title, lines[p.pid])]
            assert found, f"no process matching {title!r} under the driver"
            victims.append(found[0])
        for victim in victims:
            victim.send_signal(sig)
        return victims[0]

    def finish(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            pytest.fail(f"no exit within {timeout} s (a hang):\n{self.output()[-6000:]}")
        return self.proc.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def left_running(self, within: float = 60) -> list[str]:
        """The run's processes still running `within` s after the driver ended (polled; [] as soon as none is)."""
        deadline = time.monotonic() + within
        while True:
            running = [(pid, line) for (pid, created), line in self.seen.items() if runs(pid, created)]
            if not running or time.monotonic() > deadline:
                return [f"{pid} {line[:80]}" for pid, line in running]
            time.sleep(0.5)

    def kill_all(self) -> None:
        """Test clean-up: nothing of this run survives a failed assertion."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pid, created in self.seen:
            if runs(pid, created):
                psutil.Process(pid).kill()

    def session_folder(self) -> Path | None:
        """Ray's session folder of this run (from its raylet's command line)."""
        for line in self.seen.values():
            found = re.search(r"--session_dir=(\S+)", line)
            if found and "raylet" in line.split()[0]:
                return Path(found.group(1))
        return None


def command_line(proc) -> str:
    """The process's command line ('' once it has exited: a zombie has none)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def runs(pid: int, created: float) -> bool:
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def fault_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("[fault]")]


def metrics_of(run: "Run", step: int) -> dict[str, float]:
    from tests.training.test_train import step_metrics

    return step_metrics(run.logs, step)
