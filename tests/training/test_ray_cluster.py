"""Joining a Ray cluster as a user starts one: a head from `ray start --head`, token authentication on as Ray turns it on
(tests/training/ray_head.py), one head for the module, started by the SLURM script's own head line
(docs/examples/slurm_multinode.sh). A driver with the token trains (`extended`: test_slurm.py's jobs train so); drivers
without it, or with another, get one line before anything starts, and one asking more nodes than the cluster has is
refused; docs/faults.md's `ray job submit` line trains a 2-step job, and a job of the same line that
`ray job stop` ends mid-run (once its training rank is up) leaves no actor or process of the run. The script as SLURM
runs it: tests/training/test_slurm.py. Every process
this module starts is stopped by pid (never `ray stop`, which would stop every Ray on the machine)."""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.training.ray_head import RAY, RayHead, plain_env, start_head, wait_until
from tests.training.test_train import PROMPTS, SAMPLES, run_logs, step_metrics

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docs" / "examples" / "slurm_multinode.sh"
CPUS = 12  # logical: the tiny CPU run's actors reserve 8 (training/launch/hardware.py: ray_cpu_demand)
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled", "CUDA_VISIBLE_DEVICES": ""}



def test_the_slurm_script_parses_and_runs_its_steps_only_when_executed():
    """`bash -n`, and sourcing it (as the tests below do) defines its steps without running any."""
    assert subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True).returncode == 0
    sourced = subprocess.run(["bash", "-c", f"source {SCRIPT} && declare -F"], capture_output=True, text=True,
                             env=plain_env(RG_GRPO=str(REPO)), timeout=30)
    assert sourced.returncode == 0 and sourced.stderr == "", sourced.stderr
    for step in ("share_token", "gpus_per_node", "one_gpu_mask", "start_head", "join_head", "wait_for_nodes", "main",
                 "wait_for_driver"):
        assert f"declare -f {step}" in sourced.stdout


@pytest.mark.parametrize("exit_code, job_state, said", [
    (1, "COMPLETING", True),  # scancel: the head's raylet stopped first and Ray ended the driver (exit 1, no line)
    (1, "RUNNING", False),  # the driver failed on its own: its own lines say why
    (143, "COMPLETING", False),  # the driver got the SIGTERM and said the stop itself
    (0, "COMPLETING", False),
])
def test_the_script_says_a_stop_the_driver_could_not(tmp_path, exit_code, job_state, said):
    """scancel signals the driver and the job's Ray processes at once; when the head's raylet goes first, Ray's core
    worker ends the driver at once ("the local Raylet is dead", exit 1) before its handler runs (in CI, and in 1 of 16
    loaded SLURM runs here): the script, which waits for the driver, says the stop from the job's state."""
    (tmp_path / "squeue").write_text(f"#!/bin/sh\necho {job_state}\n")
    (tmp_path / "squeue").chmod(0o755)
    done = subprocess.run(["bash", "-c", f"set -euo pipefail; source {SCRIPT}; (sleep 0.5; exit {exit_code}) & "
                           "wait_for_driver $!"], capture_output=True, text=True, timeout=30,
                          env=plain_env(RG_GRPO=str(REPO), SLURM_JOB_ID="42",
                                        PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}"))
    assert done.returncode == exit_code, done.stderr
    line = (f"[slurm] job 42 was stopped while training (state {job_state}) and Ray ended the driver before it could "
            f"say so (exit {exit_code}); to resume from the last checkpoint, submit the same job again")
    assert (line in done.stderr) == said and done.stderr.count("[slurm]") == int(said), done.stderr


def test_the_script_outlives_the_jobs_sigterm_until_the_driver_has_said_its_stop(tmp_path):
    """SLURM signals every process of the batch step: the script's shell waits on while the driver says its line and
    shuts down, and ends with the driver's exit code (143), so nothing of the driver's clean-up is cut short."""
    driver = "trap 'sleep 1; echo \"[train] stopped by SIGTERM\" >&2; exit 143' TERM; sleep 30 & wait"
    script = subprocess.Popen(["bash", "-c", f"set -euo pipefail; source {SCRIPT}; bash -c {shlex.quote(driver)} & "
                               "echo started >&2; wait_for_driver $!"], stderr=subprocess.PIPE, text=True,
                              env=plain_env(RG_GRPO=str(REPO), SLURM_JOB_ID="42"), start_new_session=True)
    assert script.stderr.readline() == "started\n"
    time.sleep(0.5)
    for process in [psutil.Process(script.pid), *psutil.Process(script.pid).children(recursive=True)]:
        process.terminate()  # as SLURM's linuxproc/cgroup tracking does: each process of the step
    assert script.wait(timeout=30) == 143
    assert script.stderr.read() == "[train] stopped by SIGTERM\n"


@pytest.fixture(scope="module")
def head():
    started = start_head(CPUS, SCRIPT)
    try:
        yield started
    finally:
        started.stop()


def run_args(tiny_run: list[str], run_dir: Path, steps: int) -> list[str]:
    """The hydra overrides of a tiny CPU run of `steps` steps whose files are all under `run_dir`."""
    return [*tiny_run, "trainer.device=cpu", f"trainer.total_training_steps={steps}", "trainer.save_freq=-1",
            f"trainer.default_local_dir={run_dir / 'ckpt'}", f"trainer.rollout_data_dir={run_dir / 'rollouts'}",
            f"hydra.run.dir={run_dir / 'hydra'}"]


def drive(env: dict[str, str], args: list[str], timeout: float = 1200) -> subprocess.CompletedProcess:
    """`python training/train_grpo.py --config-name quickstart ARGS` in a shell whose environment is `env`."""
    return subprocess.run([sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *args],
                          cwd=REPO, env={**env, **OFFLINE}, capture_output=True, text=True, timeout=timeout)


def alive_actors(head: RayHead) -> list[dict]:
    listed = head.ray("list", "actors", f"--address={head.address}", "--filter", "state=ALIVE", "--format=json",
                      "--limit=1000", env=head.token_env())
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return [] if "No resource in the cluster" in listed.stdout else json.loads(listed.stdout)


def run_processes(head: RayHead, marker: str) -> list[str]:
    """Processes of the machine that belong to a run (the marker, its folder, in their command line), and Ray worker
    processes of the head that serve a job (titled `ray::` and neither an agent nor idle)."""
    left = []
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if marker in command and process.pid != os.getpid():
            left.append(f"{process.pid}: {command[:200]}")
    for process in head.processes():
        try:
            title = " ".join(process.cmdline())
        except psutil.NoSuchProcess:
            continue
        if title.startswith("ray::") and not re.match(r"ray::(DashboardAgent|RuntimeEnvAgent|IDLE)", title):
            left.append(f"{process.pid}: {title[:200]}")
    return left


@pytest.mark.slow
@pytest.mark.extended  # what it trains is test_slurm.py's first job (a driver in a shell with the token, RAY_ADDRESS)
@pytest.mark.timeout(1200)
def test_a_driver_with_the_token_joins_and_trains(head, tiny_run, tmp_path):
    env = head.token_env(RAY_ADDRESS=head.address)  # a shell given the token: RAY_AUTH_MODE=token, the token's file
    done = drive(env, run_args(tiny_run, tmp_path, 2))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert f"joining the Ray cluster at {head.address}: 1 node(s), {CPUS} CPUs, 1 GPU slots" in output
    assert step_metrics(run_logs(tmp_path), 2)["env/samples"] == PROMPTS * SAMPLES
    # the driver's RAY_AUTH_MODE reached the run's Ray workers (ray_init.runtime_env), the token itself did not
    driver_log = (run_logs(tmp_path) / "driver.log").read_text()
    assert "'RAY_AUTH_MODE': 'token'" in driver_log and str(head.token_file) not in driver_log


@pytest.mark.slow
def test_a_run_asking_more_nodes_than_the_cluster_has_is_refused_before_it_starts(head, tmp_path):
    """The cluster's own nodes are what the checks compare a run with (ray.nodes(), read with the token)."""
    three = drive(head.token_env(RAY_ADDRESS=head.address),
                  ["model=tiny", "trainer.device=cpu", "trainer.nnodes=3", f"hydra.run.dir={tmp_path / 'h3'}"],
                  timeout=300)
    assert three.returncode == 2, three.stdout + three.stderr
    assert "trainer.nnodes=3 x trainer.n_gpus_per_node=1 needs 3 node(s)" in three.stderr
    assert "the cluster has 1" in three.stderr and "[train]" not in three.stdout


@pytest.mark.slow
def test_a_driver_without_the_token_is_told_in_one_line_before_anything_starts(head, tmp_path):
    """A plain shell (no RAY_AUTH_*; its HOME's token, if any, is not the cluster's), and one with another token."""
    for env, why in ((plain_env(RAY_ADDRESS=head.address), "this driver sent none (RAY_AUTH_MODE is unset, not token)"),
                     (plain_env(RAY_ADDRESS=head.address, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="x" * 64),
                      "the token this driver sent (from RAY_AUTH_TOKEN) is not the cluster's")):
        done = drive(env, ["model=tiny", "trainer.device=cpu", f"hydra.run.dir={tmp_path / 'hydra'}"], timeout=300)
        assert done.returncode == 2, done.stdout + done.stderr
        [line] = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("[")]
        assert line.startswith(f"[check] the Ray cluster at {head.address} answers but refuses this driver (")
        assert f"it uses token authentication and {why}" in line
        assert "RAY_AUTH_MODE=token" in line and "RAY_AUTH_MODE=disabled" in line
        assert "[train]" not in done.stdout and "Failed to connect" not in done.stderr  # Ray was never started
        assert "x" * 64 not in line


def documented_submit() -> str:
    """docs/faults.md's `ray job submit` line, as a user copies it."""
    text = (REPO / "docs" / "faults.md").read_text()
    [line] = [line for line in text.splitlines() if line.startswith("ray job submit ")]
    return line


def submit_until_an_agent_answers(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Runs the submit; submits again while the just-started head has no job agent yet (docs/faults.md says so)."""
    deadline = time.monotonic() + 180
    while True:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1500)
        if "No available agent" not in done.stdout + done.stderr or time.monotonic() > deadline:
            return done
        time.sleep(5)


def documented_command(head: RayHead, run_args: list[str], *options: str) -> list[str]:
    """docs/faults.md's `ray job submit` line for this head and a quickstart run with `run_args`, `options` after
    `ray job submit` (a submission id)."""
    line = documented_submit()
    prefix = 'ray job submit --address=http://HEAD_IP:8265 -- bash -c "cd /path/to/rg-grpo && .venv/bin/python '
    assert line.startswith(prefix) and line.endswith('"'), line
    line = (line.replace("HEAD_IP:8265", f"127.0.0.1:{head.ports['--dashboard-port']}")
            .replace("/path/to/rg-grpo", shlex.quote(str(REPO))))
    line = line[:line.index("training/train_grpo.py")] + "training/train_grpo.py --config-name quickstart " + \
        shlex.join(run_args) + '"'
    return [RAY, "job", "submit", *options, *shlex.split(line)[3:]]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_ray_job_submit_as_documented_trains_and_a_stopped_job_leaves_nothing(head, tiny_run, tmp_path):
    token = head.token_file.read_text().strip()
    shell = plain_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)  # the docs' `export RAY_AUTH_MODE=token ...`
    done = submit_until_an_agent_answers(documented_command(head, run_args(tiny_run, tmp_path / "job", 2)), shell)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and re.search(r"Job '\w+' succeeded", output), output[-6000:]
    assert step_metrics(run_logs(tmp_path / "job"), 2)["env/samples"] == PROMPTS * SAMPLES
    # the driver's RAY_AUTH_MODE reached the run's Ray workers (ray_init.runtime_env), the token itself did not
    driver_log = (run_logs(tmp_path / "job") / "driver.log").read_text()
    assert "'RAY_AUTH_MODE': 'token'" in driver_log and token not in driver_log
    wait_until(lambda: not alive_actors(head), 60, "no actor alive after the job")

    # the same line, of a long run, stopped by `ray job stop` once it trains
    stopped, run_dir = "stopped-job", tmp_path / "stopped"
    log = tmp_path / "submit.log"
    with open(log, "w") as out:
        submit = subprocess.Popen(documented_command(head, run_args(tiny_run, run_dir, 500),
                                                     f"--submission-id={stopped}"),
                                  env=shell, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # stopped as soon as the run's training rank is up (its rollout server, agent loop and reward workers
        # starting or started): mid-run, a training start cheaper than waiting for a step
        wait_until(lambda: submit.poll() is not None or any("WorkerDict" in actor.get("class_name", "")
                                                            for actor in alive_actors(head)), 900,
                   "the job's training rank", period=3)
        assert submit.poll() is None, log.read_text()[-6000:]
        stop = head.ray("job", "stop", f"--address={head.dashboard}", stopped, env=shell)
        assert stop.returncode == 0, stop.stdout + stop.stderr
        submit.wait(timeout=120)
    finally:
        if submit.poll() is None:
            submit.kill()
    status = head.ray("job", "status", f"--address={head.dashboard}", stopped, env=shell)
    assert f"Job '{stopped}' was stopped" in status.stdout + status.stderr
    try:
        wait_until(lambda: not alive_actors(head) and not run_processes(head, str(run_dir)), 90, "nothing left")
    except AssertionError:
        raise AssertionError(f"left after `ray job stop`: actors {alive_actors(head)}, processes "
                             f"{run_processes(head, str(run_dir))}") from None
    # the job's driver ended as on SIGTERM (the resume command), and the follower printed it
    assert "[train] stopped by SIGTERM; to resume from the last checkpoint" in log.read_text(), log.read_text()[-3000:]
