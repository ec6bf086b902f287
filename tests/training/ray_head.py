"""A Ray head started as a user starts one, `ray start --head`, for tests that join it.

Token authentication is on as a user gets it: Ray's own `ray get-auth-token --generate` writes the token into the
head's HOME (a folder of the test's, so ~/.ray stays untouched), and `ray start --head` then enables token
authentication by itself. The head has its own short --temp-dir (it holds unix sockets) and its own free ports, so that
it runs beside any other Ray on the machine (a second head with Ray's default ports fails to start its dashboard agent,
and job submits to it never find one). `ray start` daemonises: `stop` kills by pid what this head started (the
processes naming its temp dir or GCS address, and their descendants), never `ray stop`, which stops every Ray on the
machine.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from training.launch.ray_auth import AUTH_VARIABLES

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
PORT_FLAGS = ("--port", "--dashboard-port", "--ray-client-server-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port",
              "--node-manager-port", "--object-manager-port")


def free_ports(count: int) -> list[int]:
    """`count` distinct ports free now, below the kernel's ephemeral range (32768 up), which every port-0 bind and
    outgoing connection of the machine draws from (a port chosen there was taken by another process before the raylet
    bound it, once), and above Ray's worker ports (10002-19999)."""
    chosen: list[int] = []
    for port in random.sample(range(20000, 32000), 200):
        with socket.socket() as sock:
            try:
                sock.bind(("0.0.0.0", port))
            except OSError:
                continue
        chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise AssertionError(f"not {count} free ports in 20000-32000")


def plain_env(**extra: str) -> dict[str, str]:
    """This process's environment without Ray's authentication variables (a shell that knows no token), plus `extra`."""
    env = {key: value for key, value in os.environ.items() if key not in AUTH_VARIABLES and key != "RAY_ADDRESS"}
    return {**env, **extra}


@dataclass
class RayHead:
    root: Path  # short: Ray's unix sockets live under root/t
    cpus: int
    ports: dict[str, int] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)
    block: subprocess.Popen | None = None  # `ray start --block`, the script's head line

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def token_file(self) -> Path:
        return self.home / ".ray" / "auth_token"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.ports['--port']}"

    @property
    def dashboard(self) -> str:
        return f"http://127.0.0.1:{self.ports['--dashboard-port']}"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a shell on this machine whose HOME holds the cluster's token (no RAY_AUTH_* set)."""
        return plain_env(HOME=str(self.home), **extra)

    def token_env(self, **extra: str) -> dict[str, str]:
        """A shell elsewhere that was given the cluster's token: RAY_AUTH_MODE=token, RAY_AUTH_TOKEN_PATH."""
        return plain_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file), **extra)

    def ray(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([RAY, *args], env=env or self.env(), capture_output=True, text=True, timeout=timeout)

    def start(self, script: Path) -> None:
        """Generates the token in the head's HOME, then starts the head with `bash script head 127.0.0.1` (the SLURM
        script's own `ray start --head --block` line) and waits, with the script's `wait_for_nodes`, until it has its
        node. The head's processes are this head's from then on (`stop`)."""
        generated = self.ray("get-auth-token", "--generate")
        assert generated.returncode == 0 and self.token_file.is_file(), generated.stdout + generated.stderr
        self.ports = dict(zip(PORT_FLAGS, free_ports(len(PORT_FLAGS))))
        extra = [f"--temp-dir={self.root / 't'}", f"--num-cpus={self.cpus}", "--num-gpus=1",  # the CPU backend's slot
                 "--dashboard-host=127.0.0.1",
                 *(f"{flag}={port}" for flag, port in self.ports.items() if flag not in ("--port", "--dashboard-port"))]
        with open(self.root / "head.log", "w") as log:
            self.block = subprocess.Popen(["bash", str(script), "head", "127.0.0.1", *extra], env=self.script_env(),
                                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        with open(self.root / "wait.log", "w") as log:
            waiting = subprocess.Popen(["bash", "-c", f"source {script} && wait_for_nodes 127.0.0.1 1"],
                                       env=self.script_env(self.token_env()), stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: waiting.poll() is not None or self.block.poll() is not None, 700, "the head's node")
        finally:
            if waiting.poll() is None:
                waiting.kill()
            waiting.wait()
        self.pids |= {p.pid for p in self.processes()}
        assert waiting.returncode == 0 and self.block.poll() is None, (
            f"the head did not start: {(self.root / 'head.log').read_text()[-3000:]}")

    def script_env(self, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
        """`base` (else `env()`) with what the SLURM script reads: the project, this head's two ports, and `extra`."""
        return {**(base or self.env()), "RG_GRPO": str(REPO), "RAY": RAY, "RAY_PORT": str(self.ports["--port"]),
                "DASHBOARD_PORT": str(self.ports["--dashboard-port"]), **extra}

    def processes(self) -> list[psutil.Process]:
        """This head's processes: those naming its temp dir or its GCS address, and every descendant of them."""
        gcs = re.compile(rf"--(gcs[-_])?address=\S+:{self.ports['--port']}\b")  # Ray's client server names no temp dir
        found: dict[int, psutil.Process] = {}
        for process in psutil.process_iter(["cmdline"]):
            command = " ".join(process.info["cmdline"] or [])
            if str(self.root / "t") in command or gcs.search(command) or process.pid in self.pids:
                found[process.pid] = process
        for process in list(found.values()):
            try:
                found.update({child.pid: child for child in process.children(recursive=True)})
            except psutil.NoSuchProcess:
                pass
        return [process for pid, process in found.items() if pid != os.getpid()]

    def stop(self) -> None:
        """Kills this head's processes by pid (SIGTERM, then SIGKILL after 10 s) and removes its folder."""
        end_processes(self.processes(), grace=10)
        if self.block is not None:
            self.block.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


def end_processes(processes: list[psutil.Process], grace: float) -> None:
    """SIGTERM to each, SIGKILL to those alive `grace` seconds later, then waits for them (gone ones are skipped)."""
    for process in processes:
        try:
            process.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)


def start_head(cpus: int, script: Path, attempts: int = 3) -> RayHead:
    """Starts a head in a new short folder under /tmp (sockets need short paths); the caller stops it. A start that
    fails (a port taken between its choice and Ray's bind) is stopped and tried again with other ports."""
    for attempt in range(attempts):
        head = RayHead(Path(tempfile.mkdtemp(prefix="rgh", dir="/tmp")), cpus)
        try:
            head.start(script)
            return head
        except AssertionError:
            head.stop()
            if attempt == attempts - 1:
                raise
        except BaseException:
            head.stop()
            raise
    raise AssertionError("unreachable")


def wait_until(condition, timeout: float, what: str, period: float = 1.0):
    """Returns condition()'s first true value within `timeout` seconds, else fails naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(period)
    raise AssertionError(f"not within {timeout:.0f} s: {what}")
