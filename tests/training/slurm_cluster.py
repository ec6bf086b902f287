"""A real SLURM cluster on this machine for the tests that submit to one: munge, slurmctld and one slurmd per node
(Debian's slurm-wlm 22.05; `make install-slurm`), each "node" a slurmd of its own (`slurmd -N NAME`, its own port,
spool and pid file) on this host, with one GPU slot of GRES (`gres.conf`: /dev/null as its device file) so that jobs
ask for `--gpus-per-node` as on a GPU cluster. Everything lives in one folder of the test's (configuration, munge key
and socket, state, spool, logs) with ports of its own, beside any other SLURM or Ray of the machine. SLURM_CONF in a
client's environment points sbatch, scontrol and scancel at it. `stop` cancels the jobs left and ends every process
this cluster started by pid (the daemons, and each slurmstepd by the marker in its environment).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.training.ray_head import end_processes, free_ports, wait_until

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "squeue", "sinfo")
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
                "DEADLINE"}
KILL_WAIT = 30  # seconds between a cancelled job's SIGTERM and its SIGKILL (SLURM's default)
MARKER = "RG_TEST_SLURM_ROOT"  # in every daemon's environment, so inherited by each slurmstepd


def find(name: str) -> str | None:
    """A SLURM or munge program on PATH or in the sbin folders Debian puts the daemons in (not on every PATH)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def unavailable() -> str | None:
    """Why a SLURM cluster cannot start here, or None."""
    missing = [name for name in PROGRAMS if find(name) is None]
    if missing:
        return f"SLURM is not installed ({', '.join(missing)} not found): `make install-slurm` installs Debian's " \
               "slurm-wlm and munge (root and apt-get)"
    if os.geteuid() != 0:
        return "slurmd runs jobs as their users and needs root; these tests run SLURM only as root"
    return None


def slurm_conf(root: Path, host: str, ports: list[int], nodes: list[str], cpus: int) -> str:
    lines = [
        "ClusterName=rgtest", f"SlurmctldHost={host}(127.0.0.1)", f"SlurmctldPort={ports[0]}", "SlurmUser=root",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={root}/munge/munge.sock",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd-%n.log",
        # no cgroups in a container: processes tracked by parentage, no CPU binding
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        # sacct needs slurmdbd and a database; the job-completion record is slurmctld's own, with the same states
        "AccountingStorageType=accounting_storage/none", "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={root}/log/jobcomp.txt", "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",  # a node's CPUs as configured here, not the machine's 2
        f"KillWait={KILL_WAIT}", "ReturnToService=2", "MpiDefault=none", "GresTypes=gpu",
        "SlurmdDebug=verbose",  # the steps' "Sent signal" lines, with their times
        *(f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} Gres=gpu:1"
          for node, port in zip(nodes, ports[1:])),
        "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    root: Path
    nodes: list[str]
    cpus: int
    daemons: list[subprocess.Popen] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def env(self, base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
        """A client's environment (`base`, else this process's): SLURM_CONF names this cluster."""
        return {**(base if base is not None else os.environ), "SLURM_CONF": str(self.conf), **extra}

    def start(self) -> None:
        for folder in ("munge", "state", "log", *(f"spool/{node}" for node in self.nodes)):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        (self.root / "munge").chmod(0o711)
        self.conf.write_text(slurm_conf(self.root, socket.gethostname(), free_ports(1 + len(self.nodes)), self.nodes,
                                        self.cpus))
        (self.root / "gres.conf").write_text("AutoDetect=off\nName=gpu File=/dev/null\n")
        munge = self.root / "munge"
        self.spawn("munged", [find("munged"), "-F", "-f", f"--socket={munge}/munge.sock", f"--key-file={key}",
                              f"--log-file={self.root}/log/munged.log", f"--pid-file={munge}/munged.pid",
                              f"--seed-file={munge}/seed"])
        wait_until(lambda: (munge / "munge.sock").exists(), 30, "munged's socket")
        self.spawn("slurmctld", [find("slurmctld"), "-D", "-f", str(self.conf)])
        for node in self.nodes:
            self.spawn(f"slurmd-{node}", [find("slurmd"), "-D", "-N", node, "-f", str(self.conf)])
        wait_until(self.idle, 60, f"{len(self.nodes)} idle node(s) (logs: {self.root / 'log'})")

    def spawn(self, name: str, command: list[str]) -> None:
        with open(self.root / "log" / f"{name}.console", "w") as out:
            self.daemons.append(subprocess.Popen(command, env=self.env(**{MARKER: str(self.root)}), stdout=out,
                                                 stderr=subprocess.STDOUT, start_new_session=True))
        if self.daemons[-1].poll() is not None:
            raise AssertionError(f"{name} exited at once: {(self.root / 'log' / f'{name}.console').read_text()}")

    def run(self, *command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(list(command), env=self.env(), capture_output=True, text=True, timeout=timeout)

    def idle(self) -> bool:
        states = self.run("sinfo", "-h", "-N", "-o", "%T").stdout.split()
        return len(states) == len(self.nodes) and all(state == "idle" for state in states)

    def sbatch(self, *args: str, env: dict[str, str], cwd: Path) -> str:
        """Submits as a user does (`sbatch ARGS` in `cwd`, with `env` plus SLURM_CONF); returns the job id."""
        done = subprocess.run(["sbatch", "--parsable", *args], cwd=cwd, env=self.env(env), capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip().split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict (JobState, ExitCode, NodeList, ...)."""
        shown = self.run("scontrol", "show", "job", "-o", job_id)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        return dict(item.split("=", 1) for item in shown.stdout.split() if "=" in item)

    def wait_for_end(self, job_id: str, timeout: float) -> dict[str, str]:
        """The job's record once it reached a final state (COMPLETED, FAILED, CANCELLED, ...)."""
        return wait_until(lambda: (job := self.job(job_id))["JobState"] in FINAL_STATES and job, timeout,
                          f"job {job_id} to end", period=2)

    def completion_record(self, job_id: str) -> str:
        """slurmctld's job-completion line of the job (jobcomp/filetxt): its final state as accounting records it."""
        lines = (self.root / "log" / "jobcomp.txt").read_text().splitlines()
        [line] = [line for line in lines if line.startswith(f"JobId={job_id} ")]
        return line

    def steps(self) -> list[psutil.Process]:
        """This cluster's slurmstepd processes (each job step's, daemonised by slurmd: found by the marker)."""
        found = []
        for process in psutil.process_iter(["name"]):
            if process.info["name"] == "slurmstepd":
                try:
                    if process.environ().get(MARKER) == str(self.root):
                        found.append(process)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
        return found

    def cancel_jobs(self) -> None:
        """Cancels every job not ended yet and waits out their kill (KillWait, then SIGKILL) and their steps."""
        if not (self.conf.exists() and self.daemons and all(d.poll() is None for d in self.daemons)):
            return
        self.run("scancel", "--full", "--partition=debug")
        deadline = time.monotonic() + KILL_WAIT + 30
        while (self.steps() or self.run("squeue", "-h").stdout.strip()) and time.monotonic() < deadline:
            time.sleep(1)

    def stop(self) -> None:
        """Cancels the jobs left, then ends the daemons and any slurmstepd of theirs."""
        self.cancel_jobs()
        end_processes(self.steps() + [psutil.Process(d.pid) for d in self.daemons if d.poll() is None], grace=15)
        for daemon in self.daemons:
            daemon.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


def start_slurm(nodes: int, cpus: int) -> SlurmCluster:
    """A cluster of `nodes` nodes of `cpus` CPUs and one GPU slot each, in a new short folder under /tmp (munge's
    socket path must be short); the caller stops it. A start that fails raises with the daemons' logs."""
    cluster = SlurmCluster(Path(tempfile.mkdtemp(prefix="rgs", dir="/tmp")), [f"node{i + 1}" for i in range(nodes)],
                           cpus)
    try:
        cluster.start()
    except BaseException as err:
        logs = "\n".join(f"--- {path.name}\n{path.read_text()[-2000:]}"
                         for path in sorted((cluster.root / "log").glob("*")) if path.is_file())
        cluster.stop()
        if isinstance(err, AssertionError):
            raise AssertionError(f"the SLURM cluster did not start: {err}\n{logs}") from None
        raise
    return cluster
