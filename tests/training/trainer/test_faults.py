"""Faults: what a run does when a process dies or the disk fills (training/trainer/faults.py, envs/producer.py,
training/trainer/processes.py). Real runs that kill or stop processes are in test_fault_runs.py.
"""

import errno
import inspect
import os
import signal
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
from training.trainer.progress import write_fault

REPO = Path(__file__).resolve().parents[3]
ARITHMETIC = ("basic_arithmetic", {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}, "train", 0)
ARGV = ["training/train_grpo.py", "--config-name", "quickstart"]


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
    text = explain(torch_error, str(tmp_path / "ckpt"), ARGV)
    assert "the disk holding" in text and "is full" in text and "MiB free" in text
    assert text.endswith("python training/train_grpo.py --config-name quickstart")


def test_the_first_recorded_fault_is_the_one_the_console_names(tmp_path):
    """A hang named by the watchdog, then the errors its kills cause: the console names the hang, once, with the
    traceback and the stacks, and the resume command; no Ray text."""
    assert write_fault(tmp_path, "hung", "step 3 made no progress for 31 s (bound 30 s); hung: rollout server 0",
                       tmp_path / "hang-1.txt")
    assert not write_fault(tmp_path, "dead", "step 3 failed; dead: rollout server 0")  # the first one stays
    ray_error = RuntimeError("ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.")
    lines = explain(ray_error, str(tmp_path), ARGV, logs=tmp_path).splitlines()
    assert lines[0] == "[fault] training stopped: step 3 made no progress for 31 s (bound 30 s); hung: rollout server 0"
    assert lines[1] == f"[fault] whole traceback: {tmp_path / 'error.log'}; the trainer's stacks at the hang: " \
                       f"{tmp_path / 'hang-1.txt'}"
    assert lines[2].endswith("python training/train_grpo.py --config-name quickstart") and len(lines) == 3


def test_the_trainers_own_error_is_recorded_below_what_died_and_a_full_disk(tmp_path):
    """The trainer records the error that ended fit before verl's tear-down (which may hang on what failed): the
    console names it even when the driver only saw the trainer's process end, but a full disk is still named as one."""
    from training.trainer.faults import fault_summary

    died = RuntimeError("The actor died unexpectedly before finishing this task.\n\tclass_name: _ReasoningGymTaskRunner")
    write_fault(tmp_path / "a", "error", fault_summary(ValueError("boom\nKeyError: 'uid'")))
    assert explain(died, str(tmp_path), ARGV, logs=tmp_path / "a").splitlines()[0] == \
        "[fault] training stopped: KeyError: 'uid'"
    write_fault(tmp_path / "b", "error", fault_summary(RuntimeError("[enforce fail at inline_container.cc:664] . "
                                                                    "unexpected pos 64 vs 46")))
    assert "the disk holding" in explain(died, str(tmp_path), ARGV, logs=tmp_path / "b").splitlines()[0]


def test_a_dead_trainer_process_is_named_as_the_trainer(tmp_path):
    """The driver's wait on Ray's task runner fails with Ray's actor error: named as the trainer, Ray's exit detail
    kept, its OOM-killer boilerplate not."""
    import ray

    class RunnerDied(ray.exceptions.ActorDiedError):
        def __init__(self, text):
            Exception.__init__(self, text)
            self.text = text

        def __str__(self):
            return self.text

    err = RunnerDied("The actor died unexpectedly before finishing this task.\n\tclass_name: _ReasoningGymTaskRunner"
                     "\n\tpid: 4242\nThe actor is dead because its worker process has died. Worker exit type: "
                     "SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of "
                     "file. Some common causes include: (1) the process was killed by the OOM killer")
    line = explain(err, str(tmp_path), ARGV, logs=tmp_path).splitlines()[0]
    assert line == ("[fault] training stopped: the trainer (Ray's task runner, pid 4242) died: its process exited "
                    "(Worker unexpectedly exits with a connection error code 2. End of file.)"), line


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


def test_a_stopped_producer_process_is_replaced_and_nothing_is_lost():
    """A child that stops answering (SIGSTOP: alive, silent) is hung after timeout_s: it is killed and a fresh
    child generates its requests again, so every item arrives; the replacement is counted as a hang."""
    hangs = []
    producer = Producer(1, timeout_s=2.0, on_respawn=hangs.append)
    try:
        producer.wait_ready()
        os.kill(producer._workers[0].process.pid, signal.SIGSTOP)
        producer.prefetch((0, "k"), (*ARITHMETIC, 0))
        producer.prefetch((1, "k"), (*ARITHMETIC, 1))
        started = time.monotonic()
        assert producer.get((0, "k"), (*ARITHMETIC, 0)) == generate_entry(*ARITHMETIC, 0)
        assert producer.get((1, "k"), (*ARITHMETIC, 1)) == generate_entry(*ARITHMETIC, 1)
        assert time.monotonic() - started < 60 and hangs == [True] and producer.respawns == 1
    finally:
        producer.close()


def test_a_generator_that_hangs_every_time_is_skipped_after_two_processes(monkeypatch):
    """A generator stuck for good hangs its replacement too: after two processes it fails alone (GenerationFailed,
    which the stream counts and skips); the request queued behind it is generated."""
    monkeypatch.setenv("RG_GRPO_TASK_MODULES", str(REPO / "tests" / "hanging_tasks.py"))
    stuck = ("test_hanging_generator", {"hang": True}, "train", 0, 0)
    producer = Producer(1, timeout_s=2.0)
    try:
        producer.wait_ready()
        producer.prefetch((0, "k"), stuck)
        producer.prefetch((1, "k"), (*ARITHMETIC, 1))
        with pytest.raises(GenerationFailed, match="hung for more than 2 s in 2 producer processes"):
            producer.get((0, "k"), stuck)
        assert producer.get((1, "k"), (*ARITHMETIC, 1)) == generate_entry(*ARITHMETIC, 1)
    finally:
        producer.close()
