"""The shipped SLURM script (docs/examples/slurm_multinode.sh) submitted as a cluster user submits it, `sbatch` from the
project's folder, to a real SLURM on this machine (tests/training/slurm_cluster.py: munge, slurmctld, a slurmd for
each of two "nodes", each with one GPU slot): its Ray head and worker start as job steps (`srun`), the driver trains
the tiny model on both nodes (one CPU-backend rank each, over gloo), checkpoints, and a second job resumes it, until
`scancel` ends its driver as SIGTERM does, leaving no process and no port of the job; the export of that run is a
model. A bad override fails the job with hydra's reason before any node starts.

The job's options are the ones a user edits on the script's #SBATCH line (nodes, GPUs a node, time), given on sbatch's
command line, which SLURM reads over the script's. Two Ray nodes share this machine, so each has its own ports and
temp dir (RAY_HEAD_ARGS, RAY_WORKER_ARGS); on a cluster each node is a machine and needs none.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.training.ray_head import PORT_FLAGS, free_ports, plain_env, wait_until
from tests.training.slurm_cluster import FINAL_STATES, KILL_WAIT, start_slurm, unavailable
from tests.training.test_multinode import TWO_RANKS, check_two_rank_steps
from tests.training.test_train import PROMPTS, SAMPLES, run_logs, step_metrics

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docs" / "examples" / "slurm_multinode.sh"
NODE_CPUS = 10  # logical, each node: the tiny two-rank run reserves 8 on the head (training/launch/hardware.py)
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=unavailable() or "")


@pytest.fixture(scope="module")
def slurm():
    cluster = start_slurm(nodes=2, cpus=NODE_CPUS)
    try:
        yield cluster
    finally:
        cluster.stop()
        for temp in RAY_TEMPS:
            shutil.rmtree(temp, ignore_errors=True)


RAY_TEMPS: list[Path] = []  # the jobs' Ray temp dirs, removed with the cluster


@pytest.fixture(autouse=True)
def no_job_left(slurm):
    """A test that fails midway leaves no job running (nor pending) for the next one."""
    yield
    slurm.cancel_jobs()


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """The HOME of the user who submits every job of the module (the script's token and the tiny model's cache are
    there: a resubmitted job finds the same model path its checkpoint names)."""
    return tmp_path_factory.mktemp("home")


def job_env(folder: Path, home: Path) -> dict[str, str]:
    """A user's shell with no Ray variables, its HOME `home` (where the script's `ray get-auth-token --generate`
    writes the token), this job's Ray logs in `folder`, and the Ray nodes' ports and the head's temp dir (two nodes on
    one machine; the temp dir under /tmp, as Ray's unix sockets need short paths: `folder`/ray-temp links to it)."""
    temp = Path(tempfile.mkdtemp(prefix="rgr", dir="/tmp"))
    RAY_TEMPS.append(temp)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ray-temp").symlink_to(temp)
    ports = free_ports(2 * len(PORT_FLAGS))
    head, worker = dict(zip(PORT_FLAGS, ports)), dict(zip(PORT_FLAGS, ports[len(PORT_FLAGS):]))
    node_only = ("--port", "--dashboard-port", "--ray-client-server-port")
    return plain_env(**OFFLINE, HOME=str(home), CONFIG="quickstart", RAY_LOGS=str(folder / "ray"),
                     RAY_PORT=str(head["--port"]), DASHBOARD_PORT=str(head["--dashboard-port"]),
                     RAY_HEAD_ARGS=" ".join([f"--temp-dir={temp}", "--dashboard-host=127.0.0.1",
                                             *(f"{k}={v}" for k, v in head.items() if k not in node_only[:2])]),
                     RAY_WORKER_ARGS=" ".join(f"{k}={v}" for k, v in worker.items() if k not in node_only))


def run_args(tiny_run: list[str], run_dir: Path, steps: int, save_freq: int) -> list[str]:
    return [*tiny_run, *TWO_RANKS, "trainer.device=cpu", f"trainer.total_training_steps={steps}",
            f"trainer.save_freq={save_freq}", f"trainer.default_local_dir={run_dir / 'ckpt'}",
            f"trainer.rollout_data_dir={run_dir / 'rollouts'}", f"hydra.run.dir={run_dir / 'hydra'}"]


def submit(slurm, folder: Path, env: dict[str, str], *args: str, nodes: int = 2) -> tuple[str, Path]:
    """`sbatch --nodes=N --gpus-per-node=1 --time=30 SCRIPT ARGS` from the project's folder; (job id, output file)."""
    output = folder / "job-%j.out"
    job = slurm.sbatch(f"--nodes={nodes}", "--gpus-per-node=1", "--time=30", f"--output={output}", str(SCRIPT), *args,
                       env=env, cwd=REPO)
    return job, folder / f"job-{job}.out"


def text(path: Path) -> str:
    """A job's output file so far ("" before SLURM creates it, while the job is pending)."""
    return path.read_text() if path.exists() else ""


def job_processes(folder: Path, env: dict[str, str]) -> list[str]:
    """Processes of the machine that belong to a job: naming its folder (the run's), Ray's temp dir or the head's
    port."""
    port = re.compile(rf"[:=]{env['RAY_PORT']}\b")
    marks = (str(folder), str((folder / "ray-temp").resolve()))
    left = []
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if (any(mark in command for mark in marks) or port.search(command)) and process.pid != os.getpid():
            left.append(f"{process.pid}: {command[:200]}")
    return left


def no_stop_line(slurm, record: dict[str, str], output: str, logs: Path) -> str:
    """What decides why a cancelled job's driver said no stop line, first (CI shows a message's head): how the job's
    script ended (ExitCode 0:9 = SIGKILL after KillWait, 0:15 = SIGTERM's default, 143:0 = ended as Terminated, 1:0 =
    Ray ended the driver, its raylet gone) and when slurmd's steps sent their signals; then the tails of the output,
    driver.log and guardian.log."""
    signals = [line for path in sorted((slurm.root / "log").glob("slurmd-*.log")) for line in text(path).splitlines()
               if ".batch]" in line and re.search(r"signal (15|9) |CANCELLED|killed", line, re.IGNORECASE)]
    return (f"no stop line; ExitCode={record.get('ExitCode')} DerivedExitCode={record.get('DerivedExitCode')}\n"
            + "\n".join(signals[-12:]) + f"\n--- output:\n{output[-1500:]}"
            + "".join(f"\n--- {name}:\n{text(logs / name)[-1500:]}" for name in ("driver.log", "guardian.log")))


def port_holders(port: int) -> list[str]:
    """Processes with a socket on `port` (a closed connection's TIME_WAIT belongs to the kernel, not to a process)."""
    return [f"{c.pid}: {c.status}" for c in psutil.net_connections(kind="inet")
            if c.pid is not None and port in (c.laddr.port if c.laddr else None, c.raddr.port if c.raddr else None)]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_sbatch_trains_on_two_nodes_a_second_job_resumes_and_scancel_stops_it_as_sigterm(slurm, home, tiny_run,
                                                                                            tmp_path):
    """The first job trains 2 steps with a checkpoint and completes; the same command resubmitted (one job start for
    both checks) resumes from step 2, trains on, and is cancelled: its driver ends as on SIGTERM and the job leaves no
    process, step or port behind; the export of the run's last checkpoint is a model."""
    env, run_dir = job_env(tmp_path / "first", home), tmp_path / "run"
    job, out = submit(slurm, tmp_path / "first", env, *run_args(tiny_run, run_dir, 2, 2))
    record = slurm.wait_for_end(job, 900)
    output = out.read_text()
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", output[-6000:]
    assert "JobState=COMPLETED" in slurm.completion_record(job) and record["NodeList"] == "node[1-2]"
    assert "[slurm] a Ray cluster of 2 node(s) at " in output
    assert re.search(r"joining the Ray cluster at \S+: 2 node\(s\), 20 CPUs, 2 GPU slots", output), output[-3000:]
    assert "[step 2/2]" in output
    check_two_rank_steps(run_dir, 2)
    assert sorted(p.name for p in (tmp_path / "first" / "ray").iterdir()) == ["node1.log", "node2.log"]
    wait_until(lambda: not job_processes(tmp_path / "first", env), 60, "no process of the first job")

    second = tmp_path / "second"  # resubmitted as a user does: the same run folder, more steps
    env = job_env(second, home)
    job, out = submit(slurm, second, env, *run_args(tiny_run, run_dir, 500, -1))
    wait_until(lambda: slurm.job(job)["JobState"] in FINAL_STATES or "[step 3/500]" in text(out), 900,
               "the resumed job's first step", period=2)
    assert slurm.job(job)["JobState"] == "RUNNING", text(out)[-6000:]
    assert f"resuming {run_dir / 'ckpt'} from step 2 of 500" in text(out)
    cancelled = slurm.run("scancel", job)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    record = slurm.wait_for_end(job, KILL_WAIT + 60)
    assert record["JobState"] == "CANCELLED" and "JobState=CANCELLED" in slurm.completion_record(job)
    output = out.read_text()
    # said by the driver, or by the script when the head's raylet stopped first and Ray ended the driver at once
    assert re.search(r"\[train\] stopped by SIGTERM; to resume from the last checkpoint|\[slurm\] job \d+ was stopped "
                     r"while training \(state \w+\) and Ray ended the driver", output), \
        no_stop_line(slurm, record, output, run_dir / "ckpt" / "logs")
    assert "[train] interrupted" not in output, output[-3000:]  # the stop is said once, as what it was
    try:
        wait_until(lambda: not job_processes(second, env) and not slurm.steps(), KILL_WAIT + 30, "nothing left")
    except AssertionError:
        raise AssertionError(f"left after scancel: {job_processes(second, env)}, steps {slurm.steps()}") from None
    assert port_holders(int(env["RAY_PORT"])) == [] and port_holders(int(env["DASHBOARD_PORT"])) == []
    assert step_metrics(run_logs(run_dir), 3)["env/samples"] == PROMPTS * SAMPLES
    export = subprocess.run([sys.executable, "utils/load_fsdp_to_hf.py", str(run_dir / "ckpt"), str(tmp_path / "hf"),
                             "--dtype", "fp32", "--verify", "--quiet"], cwd=REPO,
                            env=dict(os.environ, HF_HUB_OFFLINE="1"), capture_output=True, text=True, timeout=600)
    assert export.returncode == 0, export.stdout[-3000:] + export.stderr[-3000:]


@pytest.mark.slow
def test_a_bad_override_fails_the_job_with_its_reason_before_any_node_starts(slurm, home, tiny_run, tmp_path):
    env = job_env(tmp_path, home)
    job, out = submit(slurm, tmp_path, env, *run_args(tiny_run, tmp_path / "run", 2, -1),
                      "trainer.total_training_step=2", nodes=1)
    record = slurm.wait_for_end(job, 300)
    output = out.read_text()
    assert record["JobState"] == "FAILED" and record["ExitCode"] == "1:0", output
    assert "Could not override 'trainer.total_training_step'." in output
    assert "[slurm] a Ray cluster" not in output and not (tmp_path / "ray" / "node1.log").exists()
