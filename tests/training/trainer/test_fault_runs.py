"""Faults on real runs: `python training/train_grpo.py` on the tiny model, one or more of its own processes
(found among the driver's descendants by their process title) SIGKILLed or SIGSTOPped once a step is logged, as an
operator's bad day would. Each test asserts what the console says, how long it took, what was kept and that no
process of the run is left running afterwards.

A tiny run costs ~35 s to start on 2 cores, so faults that the run survives share one run, and the runs that stop
strike several processes at once (each must be named). Every wait polls for the state it needs; the hang bounds come
from the run's own step times (env.watchdog.factor x the slowest step so far), read from its heartbeat.
"""

import errno
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.training.trainer.fault_run import FAST_WATCHDOG, REPO, fault_lines, metrics_of, runs, train_command

# the bounds asserted here hold a run's own step times plus slack for load: run apart from the training-heavy tests
# (`make test`'s serial part, two at a time)
pytestmark = pytest.mark.serial

# how long to wait for a [recovered] line: its timing is asserted from the bound the line names, so the wait only
# has to outlast that bound on a loaded machine (two fault runs side by side, `make test`'s serial part)
RECOVERY_WAIT = 600


# ----- faults the run survives, in one run: a step after each still trains all of its samples

@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_killed_then_hung_reward_worker_and_producer_recover_a_slow_step_is_no_hang_and_ctrl_c_ends_clean(
        tiny_run, tmp_path, run_factory):
    """A mix with a slow task (its items come from a producer process). After step 1 a reward worker and a producer
    child are SIGKILLed: Ray restarts the worker and retries its calls, the producer replaces its child. After step 2
    both are SIGSTOPped (hung, alive): the watchdog restarts the reward worker past the bound, the producer replaces
    its child past half of it; each is a [recovered] line. Then one step is made slow but moving (each response
    scored alone after bound/4 s: the step lasts longer than the bound, a response finishes well within it): no
    fault. Every step trains all 8 of its samples. Then Ctrl-C (SIGINT to the terminal's process group) once the
    slow step is logged: the driver says how to resume and exits 130; a minute later no process of the run is
    running and Ray's session folder is gone. (One run for all of it: a training start costs two minutes of CI.
    Sent as soon as the first ray:: process appeared, at load 35 while ray.init was still starting Ray, a SIGINT
    was once lost: the driver now remembers it, tests/training/launch/test_interrupt.py. A stale pid of the
    Ray-restarted reward worker once kept the stopped one from being named: processes._restarted_pid. The census
    once counted the watchdog's own restart again when it learned the new pid, at the slow step, whose bound rose
    from 5 s to 54 s: diagnosis.census.)"""
    mix = tmp_path / "mix.yaml"
    mix.write_text("tasks:\n  basic_arithmetic: {weight: 1.0, config: {min_terms: 2, max_terms: 2}}\n"
                   "  countdown: {weight: 1.0}\n")
    delay = tmp_path / "reward-delay"
    # room for the producer's hang and the slow step after it: the stream asks 64 positions ahead, so the stopped
    # child may first be asked once steps resume after the worker's recovery, and is caught half a bound (~18 s) later;
    # tiny steps take 0.5-0.9 s, and the run of CI at 3f4c37d ended at its 20th step first. Ctrl-C ends it anyway.
    steps = 60
    # one producer child: with two, the stopped one could be given no request (the other answers at once and takes
    # the next)
    run = run_factory(tiny_run, tmp_path / "run", steps, f"env.mix={mix}", "env.producer_processes=1", *FAST_WATCHDOG,
                      f"reward.custom_reward_function.path={REPO / 'tests' / 'slow_reward.py'}",
                      env={"RG_GRPO_TEST_REWARD_DELAY_FILE": str(delay),
                           "RG_GRPO_TEST_PROGRESS_FILE": str(tmp_path / "run" / "logs" / "progress.jsonl")})
    run.wait_for(lambda: run.steps() >= 1, 900, "step 1")
    run.strike(r"ray::RewardLoopWorker", r"envs\.producer:_generate")
    killed_at_step = run.steps()
    run.wait_for(lambda: run.steps() >= killed_at_step + 1, 300, "a step after the kills")
    stopped_at_step = run.steps()
    bound = run.bound(stopped_at_step + 1)
    worker = run.strike(r"ray::RewardLoopWorker", r"envs\.producer:_generate", sig=signal.SIGSTOP)
    stopped = time.monotonic()
    # the stopped producer child times out after half the bound and is replaced: that is progress, and the step's
    # bound then rises while the new process warms up (3 x its start-up time, which a loaded machine stretches: the
    # wait is long, and the asserts below hold the recovery to the bound the line says it used)
    recovered = run.wait_for(lambda: any("reward worker" in e["text"] for e in run.events("recovered")),
                             RECOVERY_WAIT, "[recovered] line for the stopped reward worker")
    line = [e["text"] for e in run.events("recovered") if "reward worker" in e["text"]][0]
    stalled, used = map(float, re.search(r"no progress for (\d+) s \(bound (\d+) s", line).groups())
    assert used <= stalled <= used + 20, line  # caught at its bound (a probe's seconds apart)
    # the step in flight at the stop, from the line: steps finish every 0.5 s, so run.steps() read before the stop
    # was 4 behind in CI, the wait below ended at once and the slow step ran under the recovery's 76-s bound (203 s)
    recovery_step = int(re.search(r"step (\d+) made no progress", line).group(1))
    assert recovered - stopped < bound / 2 + used + 60, (recovered - stopped, bound, line)  # + slack for load
    run.wait_for(lambda: not runs(worker.pid, worker.create_time()), 60, "the stopped reward worker killed")
    # the producer child's hang is caught when the stream next asks it for items: before the worker's or after it.
    # Its replacement raises the bound to 3 x the start-up time until that step ends: a slow step set up before it
    # ran under that bound and did not exceed it. The step of its line is at most the one in flight when it is read.
    run.wait_for(lambda: any("producer process hung" in e["text"] for e in run.events("recovered")),
                 RECOVERY_WAIT, "[recovered] line for the stopped producer child")
    recovery_step = max(recovery_step, run.steps() + 1)
    # the step of a recovery and the next one (where the restart is noticed) are not healthy: the bound is again
    # a multiple of a warm step once a third has ended
    run.wait_for(lambda: run.steps() >= recovery_step + 2, 300, "two steps after the recoveries'")
    # the step after the one in flight is slowed from its start (tests/slow_reward.py): 8 responses one at a time,
    # one every bound/4, 2 x the bound in all (the bound is 3 x step 2's, which the kills slowed: 30-36 s)
    bound = run.bound(run.steps() + 1)
    slow_step = run.steps() + 2
    assert slow_step < steps - 1, (slow_step, steps)  # room for the Ctrl-C before the run's end
    delay.write_text(f"{slow_step} {bound / 4:.2f}")
    bound = run.bound(slow_step)  # the bound in force during the slow step (the step before it may have raised it)
    run.wait_for(lambda: run.steps() >= slow_step, 900, "the slow step")
    delay.unlink()
    os.killpg(run.proc.pid, signal.SIGINT)
    code = run.finish(120)
    output = run.output()
    assert code == 130, output[-6000:]
    assert "[train] interrupted; to resume from the last checkpoint: python training/train_grpo.py" in output
    slow = [e for e in run.events("step") if e["step"] == slow_step][0]
    assert slow["step_seconds"] > bound, (slow, bound)  # slower than the bound, yet no fault: it moved
    assert not fault_lines(output) and "could not score" not in output
    assert slow_step <= run.steps() < steps, run.steps()
    for step in range(1, slow_step + 1):
        metrics = metrics_of(run, step)
        assert metrics["env/samples"] == 8 and metrics["reliability/failed_samples"] == 0, (step, metrics)
    last = metrics_of(run, slow_step)
    assert last["env/producer_respawns"] == 2 and last["env/producer_hangs"] == 1, last
    assert any("producer process hung" in e["text"] for e in run.events("recovered")), run.events("recovered")
    assert run.left_running() == []
    assert run.session_folder() and not run.session_folder().exists()


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(1200)
def test_a_sigterm_stops_the_run_as_asked_and_leaves_nothing_behind(tiny_run, tmp_path, run_factory):
    """SIGTERM to the driver after step 1 (`kill PID`, a scheduler ending the job): the driver says it was stopped
    and how to resume, exits 143, and a minute later no process of the run is running. Before, ray.init's own
    handler stopped Ray and exited 1, read as "[fault] training stopped: 1", and the process aborted (exit 134)."""
    run = run_factory(tiny_run, tmp_path / "run", 8)
    run.wait_for(lambda: run.steps() >= 1, 900, "step 1")
    run.proc.send_signal(signal.SIGTERM)
    code = run.finish(120)
    output = run.output()
    assert code == 143, output[-6000:]
    assert "[train] stopped by SIGTERM; to resume from the last checkpoint: python training/train_grpo.py" in output
    assert not fault_lines(output)
    assert run.left_running() == []
    assert run.session_folder() and not run.session_folder().exists()


# ----- faults that stop the run: one line names each process by its role, the run ends, nothing is left

@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_killed_processes_are_each_named_by_role_on_a_quiet_console(tiny_run, tmp_path, run_factory):
    """After step 2, SIGKILL of a training rank, the rollout server, the agent loop worker and TransferQueue's
    controller and storage: the run stops (verl itself waits forever on a dead TransferQueue: the watchdog's bound
    ends that wait), the one [fault] line names each by its role, the console shows no Ray traceback (they are in
    error.log, whose path it gives), no step after the one in flight trains, and nothing of the run is left."""
    steps = 20  # room for the kill: tiny steps take seconds, and up to 3 finished between step 2 and the kill in CI
    run = run_factory(tiny_run, tmp_path / "run", steps, *FAST_WATCHDOG, verbose=False)
    run.wait_for(lambda: run.steps() >= 2, 900, "step 2")
    bound = run.bound(run.steps() + 1)
    roles = {r"ray::WorkerDict": "training rank 0", r"ray::TransformersServer": "rollout server 0",
             r"ray::AgentLoopWorker": "agent loop worker 0",
             r"ray::TransferQueueController": "TransferQueue controller",
             r"ray::SimpleStorageUnit": "TransferQueue storage 0"}
    run.strike(*roles)
    killed = time.monotonic()
    # read after the kills, not before the wait for step 3's heartbeat (steps finished in that wait once read as
    # steps after the kill): a step finished at the kill is at most this, so one more is at most the one in flight
    at_kill = run.steps()
    code = run.finish(600)
    seconds, output = time.monotonic() - killed, run.output()
    assert code == 1, output[-6000:]
    fault = fault_lines(output)
    assert fault and fault[0].startswith("[fault] training stopped: ") and "dead: " in fault[0], output[-6000:]
    for role in roles.values():
        assert role in fault[0], (role, fault[0])
    assert "[fault] whole traceback: " in output and (run.logs / "error.log").is_file()
    assert "to resume from the last checkpoint: python training/train_grpo.py --config-name quickstart" in fault[-1]
    for ray_text in ("Traceback", "ray.exceptions", "The actor died", "OOM killer"):
        assert ray_text not in output, (ray_text, output[-6000:])
    assert run.steps() <= at_kill + 1 < steps  # at most the step in flight finished
    # the bound, a probe of up to 10 s, the grace for verl to unwind, and slack for a loaded machine
    assert seconds < bound + 10 + 20 + 60, (seconds, bound)
    assert run.left_running() == []


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_stopped_rollout_server_and_training_rank_are_named_hung_and_the_checkpoint_kept(tiny_run, tmp_path,
                                                                                           run_factory):
    """After step 2, SIGSTOP of the rollout server and of the training rank (how a wedged GPU server or rank looks:
    alive, silent): within the watchdog's bound (3 x the slowest step, at least 5 s) plus a probe, the run stops;
    the [fault] line names both as hung (not dead), the last checkpoint is complete and named latest, and the
    stopped processes are gone with the rest."""
    run = run_factory(tiny_run, tmp_path / "run", 8, *FAST_WATCHDOG, save_freq=1, verbose=False)
    run.wait_for(lambda: run.steps() >= 2, 900, "step 2")
    bound = run.bound(run.steps() + 1)
    run.strike(r"ray::TransformersServer", r"ray::WorkerDict", sig=signal.SIGSTOP)
    stopped = time.monotonic()
    code = run.finish(600)
    seconds, output = time.monotonic() - stopped, run.output()
    assert code == 1, output[-6000:]
    fault = fault_lines(output)
    assert fault and "hung: " in fault[0] and "dead" not in fault[0].split("hung: ", 1)[1], output[-6000:]
    for role in ("rollout server 0", "training rank 0"):
        assert role in fault[0] and "stopped" in fault[0], (role, fault[0])
    assert "made no progress for" in fault[0] and "bound" in fault[0]
    assert "the trainer's stacks at the hang: " in output
    # the bound, a probe of up to 10 s, the grace for verl to unwind, and slack for a loaded machine
    assert seconds < bound + 10 + 20 + 60, (seconds, bound)
    ckpt = tmp_path / "run" / "ckpt"
    latest = int((ckpt / "latest_checkpointed_iteration.txt").read_text())
    assert latest >= 2 and (ckpt / f"global_step_{latest}" / "data.pt").is_file()
    assert list((ckpt / f"global_step_{latest}" / "actor").glob("model_world_size_*_rank_0.pt"))
    assert run.left_running() == []


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_stopped_trainer_is_named_hung_by_the_guardian(tiny_run, tmp_path, run_factory):
    """SIGSTOP of Ray's task runner (the trainer: its own watchdog stops with it) after step 2: its heartbeat goes
    stale, the guardian names it hung and kills it, the driver prints that and exits 1; nothing is left."""
    # 20 steps: room for the stop, as in the test above (the run is stopped long before its end)
    run = run_factory(tiny_run, tmp_path / "run", 20, *FAST_WATCHDOG, verbose=False)
    run.wait_for(lambda: run.steps() >= 2, 900, "step 2")
    run.bound(run.steps() + 1)
    stale_after = float(run.heartbeat()["stale_after"])
    run.strike(r"ray::_ReasoningGymTaskRunner", sig=signal.SIGSTOP)
    stopped = time.monotonic()
    code = run.finish(600)
    seconds, output = time.monotonic() - stopped, run.output()
    assert code == 1, output[-6000:]
    fault = fault_lines(output)
    assert fault and "the trainer (Ray's task runner, pid" in fault[0] and "hung: no heartbeat" in fault[0], output
    assert "stopped" in fault[0]
    assert seconds < stale_after + 60, (seconds, stale_after)
    assert run.left_running() == []


def tracker(ckpt: Path) -> str:
    path = ckpt / "latest_checkpointed_iteration.txt"
    return path.read_text().strip() if path.is_file() else ""


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_full_checkpoint_disk_is_named_and_the_last_checkpoint_stays_latest(tiny_run, tmp_path, run_factory):
    """The checkpoint folder sits on a small tmpfs; as soon as a first checkpoint is named latest the disk is
    filled: a later save fails (tiny steps take 0.4 s, so which one depends on timing, never the 12th), the run stops
    naming disk space and the resume command, and the checkpoint named latest is complete."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256M", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        steps = 12
        run = run_factory(tiny_run, tmp_path / "run", steps, save_freq=1, ckpt=disk / "ckpt")
        # polled often: a poll every 0.5 s once missed steps 1 to 6 altogether
        run.wait_for(lambda: tracker(disk / "ckpt") != "", 900, "a first checkpoint", period=0.02)
        first_seen = int(tracker(disk / "ckpt"))
        free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
        try:  # the run's own save may take space meanwhile: a filler cut short by ENOSPC has done its job
            with open(disk / "filler", "wb") as filler:
                filler.write(b"\0" * (free - 256 * 1024))
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
        assert run.finish(600) == 1, run.output()[-6000:]
        fault = fault_lines(run.output())
        assert fault and "the disk holding" in fault[0] and "is full" in fault[0], run.output()[-6000:]
        assert "to resume from the last checkpoint: python training/train_grpo.py" in fault[-1]
        latest = int(tracker(disk / "ckpt"))
        assert first_seen <= latest < steps, (first_seen, latest)
        complete = disk / "ckpt" / f"global_step_{latest}"
        assert (complete / "data.pt").is_file() and list((complete / "actor").glob("model_world_size_*_rank_0.pt"))
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_driver_killed_while_saving_leaves_nothing_and_resumes_from_the_last_complete_checkpoint(tiny_run, tmp_path,
                                                                                                run_factory):
    """SIGKILL of the driver as global_step_2 appears: every process of the run is gone within a minute (Ray's node
    agents, which outlive a killed driver by themselves, included: the guardian kills them) and so is Ray's session
    folder; the same command resumes from the step the tracker names (never from a half-written folder)."""
    ckpt = tmp_path / "ckpt"
    run = run_factory(tiny_run, tmp_path / "run", 3, save_freq=1, ckpt=ckpt)
    run.wait_for(lambda: (ckpt / "global_step_2").exists(), 900, "global_step_2", period=0.02)
    run.poll()
    run.proc.kill()
    run.proc.wait()
    assert run.left_running() == []
    # read only now: the trainer loop runs in a Ray actor, which can still name global_step_2 latest until the guardian
    # has killed it (CI at d9b7f4f read "1" straight after the kill, then the resume check found "2")
    at_kill = tracker(ckpt)
    assert run.session_folder() and not run.session_folder().exists()
    assert at_kill in ("1", "2")
    # what the same command decides before it starts Ray (training/launch/resume.py; loading a checkpoint in a new
    # process is test_train.py's resume, so a second start here would cost two minutes of CI and guard nothing more)
    from training.launch.config import compose_config, resolve_config
    from training.launch.resume import check_resume

    cmd, _ = train_command(tiny_run, tmp_path / "run", ckpt, 3, 1)
    overrides = [o for o in cmd[cmd.index("quickstart") + 1:] if not o.startswith("hydra.")]
    line = check_resume(resolve_config(compose_config("quickstart", overrides), gpu_count=1), launching=False)
    assert line.startswith(f"resuming {ckpt} from step {at_kill} of 3"), line
    if at_kill == "1":  # the kill cut the save of step 2: named, not resumed from; overwritten when saved again
        assert "global_step_2 past it or incomplete" in line, line
