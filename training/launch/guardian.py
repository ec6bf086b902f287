"""A process beside the run that outlives its driver: it names a trainer that stops beating and leaves nothing behind.

The launching process (train_grpo.py) starts it before Ray, in a session of its own, so neither a Ctrl-C in the
terminal nor a SIGKILL of the driver reaches it. While the driver lives, it records every descendant of the driver
(Ray's GCS, raylet, dashboard and runtime-env agents, the actors and their children) and reads the trainer's heartbeat
(training/trainer/watchdog.py): a trainer process that stops beating for longer than the bound it published is hung
(stopped, or stuck holding the interpreter so that its own watchdog cannot run). The guardian records that fault,
which the driver prints, and SIGKILLs the trainer process, so that the driver's wait on it ends.

Once the driver has ended, however it ended (finished, failed, Ctrl-C, SIGKILL), Ray gets SETTLE_SECONDS to stop its
own processes; every recorded process still running is then SIGKILLed (Ray's two node agents outlive a SIGKILLed
driver). When this run started Ray (a joined cluster's processes are not the driver's descendants, and its folder is
not ours), the workers' logs are copied to `<logs>/workers/`, Ray's own logs to `<logs>/ray/`, and Ray's session folder
(/tmp/ray/session_*) is deleted. What it did goes to `<logs>/guardian.log`.

    python -m training.launch.guardian --driver PID --logs DIR
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from training.trainer.progress import HEARTBEAT_FILE, write_fault

POLL_SECONDS = 0.5
SETTLE_SECONDS = 5.0  # Ray's own shutdown after the driver exits, before the guardian kills what is left
LOG_FILE = "guardian.log"
SESSION_ARG = re.compile(r"--session[-_]dir=(\S+)")


def start(logs: Path) -> subprocess.Popen | None:
    """Starts the guardian of this (the driver's) process; None if it cannot start (the run goes on without it)."""
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with open(logs / LOG_FILE, "a") as log:
            return subprocess.Popen([sys.executable, "-m", "training.launch.guardian", "--driver", str(os.getpid()),
                                     "--logs", str(logs)], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True, cwd=Path(__file__).resolve().parents[2])
    except OSError as err:
        print(f"[train] no guardian for this run ({err}): Ray's processes may outlive a killed driver",
              file=sys.stderr)
        return None


class Guardian:
    def __init__(self, driver: int, logs: Path):
        self.driver = psutil.Process(driver)
        self.driver_started = self.driver.create_time()
        self.logs = logs
        self.known: dict[int, float] = {}  # pid -> create time of every descendant seen
        self.session: Path | None = None
        self.faulted = False

    def say(self, text: str) -> None:
        print(f"[guardian {time.strftime('%H:%M:%S')}] {text}", flush=True)

    def driver_alive(self) -> bool:
        return _running(self.driver.pid, self.driver_started)

    def record_descendants(self) -> None:
        try:
            children = self.driver.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            if child.pid == os.getpid():  # the guardian is the driver's child too
                continue
            try:
                if child.pid not in self.known:
                    self.known[child.pid] = child.create_time()
                if self.session is None and "raylet" in child.name():
                    found = SESSION_ARG.search(" ".join(child.cmdline()))
                    self.session = Path(found.group(1)) if found else None
            except psutil.Error:
                pass

    def check_heartbeat(self) -> None:
        """A trainer that has stopped beating for longer than its published bound is hung: record it, kill it."""
        try:
            beat = json.loads((self.logs / HEARTBEAT_FILE).read_text())
        except (OSError, ValueError):
            return
        age = time.time() - float(beat.get("time", time.time()))
        if self.faulted or beat.get("done") or age <= float(beat.get("stale_after", float("inf"))):
            return
        pid = int(beat.get("pid", 0))
        ours = pid in self.known and _running(pid, self.known[pid])
        state = ""
        if ours:
            try:
                status = psutil.Process(pid).status()
                state = ("; its process is stopped (SIGSTOP or a debugger)" if status == psutil.STATUS_STOPPED
                         else f"; its process is {status}")
            except psutil.Error:
                pass
        text = (f"the trainer (Ray's task runner, pid {pid}) hung: no heartbeat for {age:.0f} s during "
                f"{beat.get('activity', '?')} (bound {float(beat['stale_after']):.0f} s){state}")
        self.faulted = True
        write_fault(self.logs, "hung", text)
        self.say(text + ("; killing it" if ours else "; it is not on this node: not killed"))
        if ours:
            _kill(pid, self.known[pid])

    def clean_up(self) -> None:
        """After the driver: Ray's shutdown gets SETTLE_SECONDS, then what is left is killed; logs kept, folder gone."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while time.monotonic() < deadline and self.left():
            time.sleep(POLL_SECONDS)
        left = {pid: _name(pid) for pid in self.left()}
        for pid in left:
            _kill(pid, self.known[pid])
        if left:
            self.say(f"killed {len(left)} process(es) of the run still running {SETTLE_SECONDS:g} s after the "
                     f"driver ended: {', '.join(f'{pid} {name}' for pid, name in left.items())}")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.left():
            time.sleep(POLL_SECONDS)
        if self.session is not None and self.session.is_dir():
            self.keep_logs()
            shutil.rmtree(self.session, ignore_errors=True)
            latest = self.session.parent / "session_latest"
            if latest.is_symlink() and Path(os.readlink(latest)) == self.session:
                latest.unlink(missing_ok=True)
            self.say(f"deleted Ray's session folder {self.session} (its logs are in {self.logs})")

    def keep_logs(self) -> None:
        from training.launch.ray_logs import collect_worker_logs

        ray_logs = self.session / "logs"
        collect_worker_logs(ray_logs, self.logs)
        link = self.logs / "ray"
        if link.is_symlink():
            link.unlink()
        try:
            shutil.copytree(ray_logs, link, dirs_exist_ok=True,
                            ignore=lambda folder, names: [n for n in names if n.startswith("worker-") or n == "old"])
        except (OSError, shutil.Error) as err:
            self.say(f"could not copy all of Ray's logs to {link}: {err}")

    def left(self) -> list[int]:
        return [pid for pid, created in self.known.items() if _running(pid, created)]

    def run(self) -> None:
        self.say(f"watching driver {self.driver.pid}")
        while self.driver_alive():
            self.record_descendants()
            self.check_heartbeat()
            time.sleep(POLL_SECONDS)
        self.say("the driver has ended")
        self.clean_up()


def _running(pid: int, created: float) -> bool:
    """The process that had this pid and start time still runs (an exited one waiting for its parent does not)."""
    try:
        process = psutil.Process(pid)
        return process.create_time() == created and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _kill(pid: int, created: float) -> None:
    try:
        process = psutil.Process(pid)
        if process.create_time() == created:
            process.kill()  # SIGKILL ends a stopped process too
    except psutil.Error:
        pass


def _name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except psutil.Error:
        return "?"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--driver", type=int, required=True, help="pid of the launching process")
    parser.add_argument("--logs", type=Path, required=True, help="the run's env.logs_dir")
    args = parser.parse_args(argv)
    try:
        guardian = Guardian(args.driver, args.logs)
    except psutil.Error:
        return  # the driver is already gone: nothing of it to watch
    guardian.run()


if __name__ == "__main__":
    main()
