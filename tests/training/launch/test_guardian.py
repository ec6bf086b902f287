"""The guardian (training/launch/guardian.py) on stand-in processes: a driver whose descendants outlive it, a "raylet"
with a session folder, a trainer that stops beating. Real runs (Ctrl-C, a SIGKILLed driver) are in
tests/training/trainer/test_fault_runs.py; this one proves the mechanism in seconds without Ray.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from training.trainer.progress import read_fault

REPO = Path(__file__).resolve().parents[3]

# A driver as train_grpo.py starts one: the guardian first, then a "raylet" (named so, with its session folder on
# the command line) whose child leaves the driver's session and ignores SIGTERM, like Ray's node agents, and a
# "trainer". It writes their pids and sleeps until killed.
DRIVER = r"""
import ctypes, os, subprocess, sys, time
from pathlib import Path
from training.launch.guardian import start
logs, session = Path(sys.argv[1]), sys.argv[2]
start(logs)
time.sleep(1)  # the guardian sees the descendants as they come
raylet = subprocess.Popen([sys.executable, "-c", '''
import ctypes, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(15, b"raylet", 0, 0, 0)
agent = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"], start_new_session=True)
print(agent.pid, flush=True)
time.sleep(600)
''', f"--session_dir={session}"], stdout=subprocess.PIPE, text=True)
agent = raylet.stdout.readline().strip()
trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(logs / "pids").write_text(f"{raylet.pid} {agent} {trainer.pid}")
time.sleep(600)
"""


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_a_silent_trainer_is_named_and_nothing_outlives_a_killed_driver(tmp_path):
    logs, session = tmp_path / "logs", tmp_path / "ray" / "session_2026-01-01_00-00-00_1"
    (session / "logs").mkdir(parents=True)
    (session / "logs" / "raylet.out").write_text("raylet says\n")
    (session / "logs" / "worker-abc-01000000-777.out").write_text(":actor_name:WorkerDict\nrank 0 says\n")
    logs.mkdir()
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(logs), str(session)], cwd=REPO,
                              start_new_session=True)
    pids = []
    try:
        assert wait_until(lambda: (logs / "pids").exists(), 60), "the stand-in driver did not start"
        raylet, agent, trainer = pids = [int(pid) for pid in (logs / "pids").read_text().split()]
        time.sleep(1.5)  # a few of the guardian's rounds: it has seen them all
        # the trainer beat 30 s ago and promised to beat within 5 s: it is hung
        (logs / "heartbeat.json").write_text(json.dumps({"pid": trainer, "time": time.time() - 30, "stale_after": 5,
                                                         "activity": "step 3", "done": False}))
        assert wait_until(lambda: read_fault(logs) is not None and not running(trainer), 10)
        fault = read_fault(logs)
        assert fault["kind"] == "hung" and f"the trainer (Ray's task runner, pid {trainer}) hung" in fault["text"]
        assert "during step 3" in fault["text"]
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        assert running(agent), "the stand-in agent should outlive the driver by itself"
        assert wait_until(lambda: not running(agent) and not running(raylet), 30), "left running after the driver"
        assert wait_until(lambda: not session.exists(), 10), "Ray's session folder is still there"
        assert (logs / "workers" / "WorkerDict-777.out").read_text().endswith("rank 0 says\n")
        assert (logs / "ray" / "raylet.out").read_text() == "raylet says\n"
        log = (logs / "guardian.log").read_text()
        assert "killed" in log and f"deleted Ray's session folder {session}" in log
    finally:
        for pid in [driver.pid, *pids]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
