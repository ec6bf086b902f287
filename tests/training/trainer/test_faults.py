"""Faults: what a run does when a process dies or the disk fills (training/trainer/faults.py, envs/producer.py).

The slow tests run `python training/train_grpo.py` on the tiny model and SIGKILL one of the run's own processes
(found among the driver's descendants by their process title) after step 1, as an operator's bad day would.
"""

import errno
import inspect
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envs.generation import generate_entry
from envs.producer import GenerationFailed, Producer
from training.trainer.faults import (
    FailedSamples,
    RestartingRewardLoopManager,
    check_failed_samples,
    explain,
    failed_samples,
    is_disk_full,
)

REPO = Path(__file__).resolve().parents[3]
ARITHMETIC = ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, "train", 0)


def test_a_short_batch_stops_the_run_and_names_what_died():
    assert failed_samples(32, 32) == 0 and failed_samples(32, 20) == 12
    check_failed_samples(0, 32, 0.0, [])
    check_failed_samples(1, 32, 0.05, [])  # 3% under a 5% threshold
    with pytest.raises(FailedSamples, match=r"lost 12 of its 32 samples .* dead: reward worker 1"):
        check_failed_samples(12, 32, 0.0, ["reward worker 1 (RewardLoopWorker): the actor died"])


def test_a_full_disk_is_named_with_the_resume_command(tmp_path):
    torch_error = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 46")
    assert is_disk_full(torch_error) and is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not is_disk_full(RuntimeError("CUDA error: device-side assert"))
    text = explain(torch_error, str(tmp_path / "ckpt"), ["training/train_grpo.py", "--config-name", "quickstart"])
    assert "the disk holding" in text and "is full" in text and "MiB free" in text
    assert text.endswith("python training/train_grpo.py --config-name quickstart")


def test_contract_verl_builds_reward_workers_as_the_patch_expects():
    """Patch 4: verl builds the reward worker class in RewardLoopManager.__init__, then calls the method we extend,
    and the v1 trainer looks the manager up by its module-level name."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopManager
    from verl.trainer.ppo.v1 import trainer_base

    import training.trainer.trainer  # noqa: F401  (installs the manager)

    init = inspect.getsource(RewardLoopManager.__init__)
    assert "self.reward_loop_workers_class = ray.remote(RewardLoopWorker)" in init
    assert init.index("ray.remote(RewardLoopWorker)") < init.index("self._init_reward_loop_workers()")
    # ours replaces verl's worker loop: it must still build the same workers (names, node affinity, arguments)
    loop = inspect.getsource(RewardLoopManager._init_reward_loop_workers)
    for part in ('name=f"reward_loop_worker_{i}"', "NodeAffinitySchedulingStrategy(",
                 ".remote(self.config, self.reward_router_address)", "self.config.reward.num_workers"):
        assert part in loop, part
    assert "RewardLoopManager(" in inspect.getsource(trainer_base.PPOTrainer._setup)
    assert trainer_base.RewardLoopManager is RestartingRewardLoopManager


def test_a_killed_producer_process_is_replaced_and_nothing_is_lost():
    producer = Producer(1)
    try:
        producer.wait_ready()
        keys = [(position, "k") for position in range(30)]
        for key in keys:
            producer.prefetch(key, (*ARITHMETIC, key[0]))
        os.kill(producer._workers[0].process.pid, signal.SIGKILL)
        got = [producer.get(key, (*ARITHMETIC, key[0])) for key in keys]
        assert got == [generate_entry(*ARITHMETIC, position) for position in range(30)]
        assert producer.respawns == 1
    finally:
        producer.close()


def test_a_stream_counts_a_producer_death_when_it_happens_and_across_a_resume():
    """The trainer reads stream.stats at the end of each step: a death must show there at once, not only after the
    stream's next item (a kill during a run's last step would otherwise never be counted), and survive a resume."""
    from envs.stream import TaskStream

    stream = TaskStream({"tasks": {"countdown": {"weight": 1.0}}}, producer_processes=1)
    try:
        stream.start()
        os.kill(stream._producer._workers[0].process.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while stream.stats["producer_respawns"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert stream.stats["producer_respawns"] == 1
        state = stream.state_dict()
    finally:
        stream.close()
    resumed = TaskStream({"tasks": {"countdown": {"weight": 1.0}}}, producer_processes=1)
    try:
        resumed.load_state_dict(state)
        resumed.start()
        os.kill(resumed._producer._workers[0].process.pid, signal.SIGKILL)
        assert resumed.take(2)  # the replacement generates
        assert resumed.stats["producer_respawns"] == 2  # the run's count, not this process's
    finally:
        resumed.close()


def test_a_hanging_generator_is_skipped_and_the_rest_arrive():
    """A request past timeout_s kills its child; it fails alone (GenerationFailed), the others are regenerated."""
    producer = Producer(1, timeout_s=2.0)
    try:
        producer.wait_ready()
        os.kill(producer._workers[0].process.pid, signal.SIGSTOP)  # like a generator stuck in C code: no answer
        producer.prefetch((0, "k"), (*ARITHMETIC, 0))
        producer.prefetch((1, "k"), (*ARITHMETIC, 1))
        started = time.monotonic()
        with pytest.raises(GenerationFailed, match="hung for more than 2 s"):
            producer.get((0, "k"), (*ARITHMETIC, 0))
        assert time.monotonic() - started < 10
        assert producer.get((1, "k"), (*ARITHMETIC, 1)) == generate_entry(*ARITHMETIC, 1)
    finally:
        producer.close()


# ----- real runs on the tiny model: one process of the run SIGKILLed after step 1

def train_command(tiny_run: list[str], run_dir: Path, ckpt: Path, steps: int, save_freq: int,
                  *overrides: str) -> tuple[list[str], dict[str, str]]:
    """Returns the command line and environment of a tiny CPU run checkpointing into `ckpt` every `save_freq` steps
    (-1: never), with verl's step lines on the console (they tell the tests when to strike)."""
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *tiny_run, "trainer.device=cpu",
           f"trainer.total_training_steps={steps}", f"trainer.save_freq={save_freq}",
           f"trainer.default_local_dir={ckpt}", f"hydra.run.dir={run_dir / 'hydra'}", "env.dump.every_steps=0",
           "env.console=verbose", *overrides]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
               CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1")
    return cmd, env


def run_with_kill(tiny_run: list[str], run_dir: Path, titles: list[str], steps: int, *overrides: str,
                  timeout: float = 900) -> tuple[int, str, float, int]:
    """Starts train_grpo.py, SIGKILLs its first descendant whose command line matches each of `titles` once step 1
    is logged, and returns (exit code, output, seconds from the kill to the exit, the last step logged before the
    kill: tiny steps take ~0.5 s and the log is read every 0.2 s, so that can be step 2)."""
    import psutil

    cmd, env = train_command(tiny_run, run_dir, run_dir, steps, -1, *overrides)
    log = run_dir / "output.log"
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline, killed_at = time.monotonic() + timeout, None
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
                logged = log.read_text(errors="replace")
                if killed_at is None and re.search(r"\bstep:1 - ", logged):
                    steps_at_kill = max(int(n) for n in re.findall(r"\bstep:(\d+) - ", logged))
                    family = psutil.Process(proc.pid).children(recursive=True)
                    for title in titles:
                        victims = [p for p in family if re.search(title, command_line(p))]
                        assert victims, f"no process matching {title!r} under the driver"
                        victims[0].kill()
                    killed_at = time.monotonic()
            assert proc.poll() is not None, f"no exit within {timeout} s (a hang):\n{log.read_text()[-4000:]}"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert killed_at is not None, log.read_text()[-4000:]
    return proc.returncode, log.read_text(errors="replace"), time.monotonic() - killed_at, steps_at_kill


def command_line(proc) -> str:
    """The process's command line ('' once it has exited: a zombie has none)."""
    import psutil

    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def metrics_of(output: str, step: int) -> dict[str, float]:
    from tests.training.test_train import step_metrics

    return step_metrics(output, step)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_killed_reward_worker_and_producer_are_replaced_and_every_step_trains_its_full_batch(tiny_run, tmp_path):
    """A mix with a slow task (its items come from a producer process); after step 1 a reward worker and, through
    the same run, a producer child are SIGKILLed: Ray restarts the worker and retries its calls, the producer replaces
    its child, and steps 2-5 train all 8 of their samples, none scored 0 for a dead scorer; the last step's metrics
    count the respawn."""
    mix = tmp_path / "mix.yaml"
    mix.write_text("tasks:\n  basic_arithmetic: {weight: 1.0, config: {min_terms: 2, max_terms: 2}}\n"
                   "  countdown: {weight: 1.0}\n")
    code, output, _, _ = run_with_kill(tiny_run, tmp_path / "reward",
                                    [r"ray::RewardLoopWorker", r"envs\.producer:_generate"], 5, f"env.mix={mix}")
    assert code == 0, output[-6000:]
    for step in (1, 2, 3, 4, 5):
        metrics = metrics_of(output, step)
        assert metrics["env/samples"] == 8 and metrics["reliability/failed_samples"] == 0, (step, metrics)
    assert "could not score" not in output
    assert metrics_of(output, 5)["env/producer_respawns"] == 1


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_killed_rollout_server_stops_the_run_naming_it(tiny_run, tmp_path):
    """The rollout server holds the synced weights: the run stops within a bounded time, names it, says how to
    resume, and no step after the one in flight at the kill trains."""
    code, output, seconds, steps_at_kill = run_with_kill(tiny_run, tmp_path / "rollout", [r"ray::TransformersServer"],
                                                         6)
    assert code == 1, output[-6000:]
    assert seconds < 120, seconds
    fault = [line for line in output.splitlines() if line.startswith("[fault]")]
    assert fault and "rollout server 0" in fault[0] and "dead" in fault[0], output[-6000:]
    assert "training/train_grpo.py --config-name quickstart" in fault[-1]
    trained = [int(n) for n in re.findall(r"\bstep:(\d+) - ", output)]
    assert max(trained) <= steps_at_kill + 1 < 6, (steps_at_kill, trained)  # at most the step in flight finished


def start_run(tiny_run: list[str], run_dir: Path, ckpt: Path, steps: int, *overrides: str):
    """Starts train_grpo.py saving every step into `ckpt`; returns (process, log path)."""
    cmd, env = train_command(tiny_run, run_dir, ckpt, steps, 1, *overrides)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / f"output-{time.monotonic_ns()}.log"
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True), log


def wait_for(condition, proc, timeout: float, period: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if condition():
            return True
        time.sleep(period)
    return condition()


def tracker(ckpt: Path) -> str:
    path = ckpt / "latest_checkpointed_iteration.txt"
    return path.read_text().strip() if path.is_file() else ""


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_full_checkpoint_disk_is_named_and_the_last_checkpoint_stays_latest(tiny_run, tmp_path):
    """The checkpoint folder sits on a small tmpfs; as soon as a first checkpoint is named latest the disk is
    filled: a later save fails (tiny steps take 0.4 s, so which one depends on timing, never the 12th), the run stops
    naming disk space and the resume command, and the checkpoint named latest is complete."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256M", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    proc = None
    try:
        steps = 12
        proc, log = start_run(tiny_run, tmp_path / "run", disk / "ckpt", steps)
        # polled often: a poll every 0.5 s once missed steps 1 to 6 altogether
        assert wait_for(lambda: tracker(disk / "ckpt") != "", proc, 900, period=0.02), log.read_text()[-4000:]
        first_seen = int(tracker(disk / "ckpt"))
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        try:  # the run's own save may take space meanwhile: a filler cut short by ENOSPC has done its job
            with open(disk / "filler", "wb") as filler:
                filler.write(b"\0" * (free - 256 * 1024))
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
        proc.wait(timeout=600)
        output = log.read_text(errors="replace")
        assert proc.returncode == 1, output[-6000:]
        fault = [line for line in output.splitlines() if line.startswith("[fault]")]
        assert fault and "the disk holding" in fault[0] and "is full" in fault[0], output[-6000:]
        assert "to resume from the last checkpoint: python training/train_grpo.py" in fault[-1]
        latest = int(tracker(disk / "ckpt"))
        assert first_seen <= latest < steps, (first_seen, latest)
        complete = disk / "ckpt" / f"global_step_{latest}"
        assert (complete / "data.pt").is_file() and list((complete / "actor").glob("model_world_size_*_rank_0.pt"))
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_driver_killed_while_saving_resumes_from_the_last_complete_checkpoint(tiny_run, tmp_path):
    """SIGKILL of the driver as global_step_2 appears: Ray's processes go with it, and a new driver resumes from
    the step the tracker names (never from a half-written folder) and finishes."""
    import psutil

    ckpt = tmp_path / "ckpt"
    proc, log = start_run(tiny_run, tmp_path / "run", ckpt, 3)
    assert wait_for(lambda: (ckpt / "global_step_2").exists(), proc, 900, period=0.02), log.read_text()[-4000:]
    family = psutil.Process(proc.pid).children(recursive=True)
    # Ray's node agents (dashboard and runtime-env agents) outlive a SIGKILLed driver: tolerated and named in the
    # README; everything else of the run (GCS, raylet, TaskRunner, workers, servers, children) must go with it
    agent = re.compile(r"ray::(DashboardAgent|RuntimeEnv)|dashboard/agent\.py|runtime_env/agent")
    agents = [p for p in family if agent.search(command_line(p))]
    proc.kill()
    proc.wait()
    at_kill = tracker(ckpt)
    for leftover in agents:  # first, so that no exited child of theirs waits for its reaper
        try:
            leftover.kill()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs([p for p in family if p not in agents], timeout=60)
    running = []
    for leftover in alive:
        try:
            if leftover.status() != psutil.STATUS_ZOMBIE:  # exited, waiting for a living agent to reap it
                running.append(leftover)
        except psutil.Error:
            pass
    for leftover in running:
        try:
            leftover.kill()
        except psutil.Error:
            pass
    assert not running, f"left running after the driver died: {[command_line(p) for p in running]}"
    assert at_kill in ("1", "2")
    resumed, log = start_run(tiny_run, tmp_path / "run", ckpt, 3)
    resumed.wait(timeout=900)
    output = log.read_text(errors="replace")
    assert resumed.returncode == 0, output[-6000:]
    assert f"[resume] resuming {ckpt} from step {at_kill} of 3" in output
    if at_kill == "1":  # the kill cut the save of step 2: named, not resumed from, then written again
        assert "global_step_2 past it or incomplete" in output
    assert tracker(ckpt) == "3" and (ckpt / "global_step_2" / "data.pt").is_file()
