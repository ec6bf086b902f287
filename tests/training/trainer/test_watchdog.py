"""The watchdog's bounds and verdicts (training/trainer/activity.py, diagnosis.py, watchdog.py), on a stand-in
trainer, no Ray.

Real runs that freeze a process are in test_fault_runs.py; here the clock is moved by hand (`_check(now)`), the probe
of the run's processes is replaced by a list of answers, and everything else is the watchdog's own code.
"""

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import training.trainer.diagnosis as diagnosis_module
import training.trainer.watchdog as watchdog_module
from training.trainer.activity import WatchdogSettings
from training.trainer.processes import ALIVE, DEAD, SILENT, Probe, RunProcess
from training.trainer.progress import read_fault
from training.trainer.watchdog import Watchdog


class Buffer:
    """verl's ReplayBuffer tables that the watchdog reads (partition -> keys)."""

    def __init__(self):
        self.partitions, self.running_keys, self.finished_keys, self.failure_keys = {}, {}, {}, {}


def make(tmp_path, **settings) -> tuple[Watchdog, SimpleNamespace]:
    trainer = SimpleNamespace(timing_raw={}, replay_buffer=Buffer())
    values = {"factor": 4.0, "min_seconds": 10.0, "startup_seconds": 600.0, **settings}
    return Watchdog(trainer, WatchdogSettings(**values), tmp_path), trainer


def near(value: float):
    return pytest.approx(value, abs=0.5)


def age(dog: Watchdog, seconds: float) -> None:
    """Moves every time the watchdog holds `seconds` into the past."""
    for frame in dog.activities.frames:
        frame.started -= seconds
    dog.activities.began -= seconds
    dog.last_progress -= seconds


def test_bounds_come_from_the_run_with_a_floor_and_apart_for_saves_and_validations(tmp_path):
    dog, _ = make(tmp_path)
    assert dog.bound() == near(600)  # start-up: env.watchdog.startup_seconds
    age(dog, 30)
    dog.ready()  # 30 s of start-up: before any step, 4 x 30 s
    assert dog.bound("step") == near(120) and dog.bound("save") == near(120)
    dog.step_begin(1)
    age(dog, 8)
    dog.step_begin(2)  # step 1, a warm-up, took 8 s: it stands in until step 2 is measured
    assert dog.bound("step") == near(32) and "4 x the slowest step so far, 8.0 s" in dog.activities.explain_bound("step")
    age(dog, 3)
    dog.enter("save", "the checkpoint save of step 2")  # a save is not a step: its first bound is the first-step one
    assert dog.bound() == near(120)
    age(dog, 50)
    dog.leave()
    dog.step_begin(3)  # step 2: 3 s of training, the 50 s save counted apart; the warm-up no longer counts
    assert dog.bound("step") == near(12) and dog.bound("save") == near(200)
    age(dog, 1)
    dog.step_begin(4)
    assert dog.bound("step") == near(12)  # the slowest so far, not the last
    assert make(tmp_path, min_seconds=100.0)[0].bound("step") == near(2400)  # 4 x the 600 s start-up bound
    dog2, _ = make(tmp_path, first_seconds=45.0)
    dog2.ready()
    assert dog2.bound("step") == near(45)


def test_a_process_replaced_during_a_step_warms_up_under_the_first_step_bound(tmp_path):
    """A reward worker restarted (or a producer child replaced) in step 3 imports and starts its scorers again, as
    at the run's start: on a loaded machine that outlasted 3 warm steps. Until step 3 ends its bound is the
    first-step one; step 3 is not timed; step 4 is bound by the warm steps again."""
    dog, _ = make(tmp_path)
    age(dog, 30)
    dog.ready()  # 30 s of start-up: the first-step bound is 4 x 30 s
    for step in (1, 2, 3):
        dog.step_begin(step)
        age(dog, 2)
    assert dog.bound("step") == near(10)  # 4 x 2 s, at least min_seconds
    dog._recovered("reward worker 0 ...: hung; restarted by Ray, its calls retried (nothing lost)")
    assert dog.bound("step") == near(120) and dog.producer_timeout() == near(60)
    assert "4 x the start-up time, 30 s, while a process replaced in this activity warms up" in \
        dog.activities.explain_bound("step")
    age(dog, 40)  # the replacement's warm-up: 40 s, no hang, and not the slowest step either
    dog.step_begin(4)
    assert dog.bound("step") == near(10)


def test_progress_resets_the_clock_and_only_a_stall_is_diagnosed(tmp_path, monkeypatch):
    dog, trainer = make(tmp_path)
    dog.ready()
    for step in (1, 2):  # 5 s each: bound max(10, 20) = 20 s
        dog.step_begin(step)
        age(dog, 5)
    dog.step_begin(3)
    diagnosed = []
    monkeypatch.setattr(dog, "_diagnose", lambda frame, stalled, bound: diagnosed.append((frame.label, stalled)))
    dog._check(time.monotonic())
    for _ in range(6):  # a slow step that moves: a rollout session finishes every 15 s, each under the bound
        age(dog, 15)
        trainer.replay_buffer.partitions["train"] = {f"k{i}": {} for i in range(len(trainer.replay_buffer.partitions
                                                                                    .get("train", {})) + 1)}
        dog._check(time.monotonic())
    assert not diagnosed and time.monotonic() - dog.last_progress < 1
    trainer.timing_raw["gen"] = 1.0  # a phase ends
    age(dog, 15)
    dog._check(time.monotonic())
    assert not diagnosed
    trainer.replay_buffer.partitions["train"] = {}  # verl rebuilding its tables: smaller is not progress
    age(dog, 21)
    dog._check(time.monotonic())
    assert diagnosed and diagnosed[0][0] == "step 3" and diagnosed[0][1] > 20


def answers(*probes):
    return lambda processes, timeout: list(probes)


def stalled_dog(tmp_path, monkeypatch, *probes):
    """A watchdog 11 s into a stall of step 3, with a bound of 10 s; the probe answers `probes`."""
    dog, _ = make(tmp_path)
    dog.ready()
    for step in (1, 2):
        dog.step_begin(step)
        age(dog, 2)
    dog.step_begin(3)
    killed = []
    monkeypatch.setattr(diagnosis_module, "run_processes", lambda trainer: [p.process for p in probes])
    monkeypatch.setattr(diagnosis_module, "probe", answers(*probes))
    monkeypatch.setattr(diagnosis_module, "kill", lambda process: killed.append(process.role))
    monkeypatch.setattr(watchdog_module, "kill", lambda process: killed.append(process.role))
    age(dog, 11)
    return dog, killed


def test_a_stopped_reward_worker_is_restarted_and_the_run_goes_on(tmp_path, monkeypatch):
    worker = RunProcess("reward worker 0", None, restartable=True, pid=41)
    server = RunProcess("rollout server 0", None, pid=42)
    dog, killed = stalled_dog(tmp_path, monkeypatch, Probe(worker, SILENT, "stopped", stopped=True),
                              Probe(server, ALIVE))
    dog._check(time.monotonic())
    assert killed == ["reward worker 0"] and dog.faulted_at is None and read_fault(tmp_path) is None
    events = [json.loads(line) for line in (tmp_path / "progress.jsonl").read_text().splitlines()]
    assert events[-1]["kind"] == "recovered" and "reward worker 0" in events[-1]["text"]
    assert "hung" in events[-1]["text"] and "nothing lost" in events[-1]["text"]
    assert time.monotonic() - dog.last_progress < 1  # the restart counts as progress
    age(dog, 11)  # Ray's restart takes a while: the worker still does not answer; it is not killed again
    dog._check(time.monotonic())
    assert killed == ["reward worker 0"] and dog.faulted_at is None and read_fault(tmp_path) is None


def test_a_stopped_rollout_server_stops_the_run_named_as_hung(tmp_path, monkeypatch):
    server = RunProcess("rollout server 0", None, pid=42)
    rank = RunProcess("training rank 0", None, pid=43)
    dog, killed = stalled_dog(tmp_path, monkeypatch, Probe(server, SILENT, "its process is stopped", stopped=True),
                              Probe(rank, ALIVE))
    dog._check(time.monotonic())
    fault = read_fault(tmp_path)
    assert fault["kind"] == "hung" and "step 3 made no progress for 11 s (bound 10 s" in fault["text"]
    assert "hung: rollout server 0" in fault["text"] and "training rank 0" not in fault["text"]
    assert killed == ["rollout server 0"] and dog.faulted_at is not None
    assert "stopped" in Path(fault["details"]).read_text()


def test_a_dead_process_found_at_a_stall_is_named_dead(tmp_path, monkeypatch):
    storage = RunProcess("TransferQueue storage 0", None, pid=44)
    dog, _ = stalled_dog(tmp_path, monkeypatch, Probe(storage, DEAD, "its process exited"))
    dog._check(time.monotonic())
    assert "dead: TransferQueue storage 0" in read_fault(tmp_path)["text"]


def test_a_busy_process_gets_two_more_bounds_before_the_run_stops(tmp_path, monkeypatch):
    """A training rank inside a long update does not answer but computes: not hung at the bound (a slow step on a
    loaded machine), nor at twice the bound; still without progress at three times, the run stops naming it and
    where the trainer waits. An idle silent process is no culprit while another computes (it may wait for it)."""
    rank = RunProcess("training rank 0", None, pid=43)
    other = RunProcess("training rank 1", None, pid=44)
    dog, killed = stalled_dog(tmp_path, monkeypatch, Probe(rank, SILENT, "busy", busy=True),
                              Probe(other, SILENT, "no CPU time"))
    dog._check(time.monotonic())
    dog._check(time.monotonic())  # probed once per bound, not every second
    age(dog, 10)
    dog._check(time.monotonic())
    assert dog.faulted_at is None and read_fault(tmp_path) is None
    age(dog, 10)
    dog._check(time.monotonic())
    fault = read_fault(tmp_path)
    assert fault and "no process is stopped, dead or idle" in fault["text"] and "the trainer waits in" in fault["text"]
    assert "training rank 0" in fault["text"] and not killed


def test_with_every_process_answering_the_run_stops_at_twice_the_bound(tmp_path, monkeypatch):
    server = RunProcess("rollout server 0", None, pid=42)
    dog, _ = stalled_dog(tmp_path, monkeypatch, Probe(server, ALIVE))
    dog._check(time.monotonic())
    assert read_fault(tmp_path) is None
    age(dog, 10)
    dog._check(time.monotonic())
    assert "every one answers" in read_fault(tmp_path)["text"]


def test_settings_are_checked(tmp_path):
    config = SimpleNamespace(env={"watchdog": {"factor": 5, "min_seconds": 60, "first_secs": 1}})
    with pytest.raises(ValueError, match=r"env.watchdog: unknown keys \['first_secs'\]"):
        WatchdogSettings.from_config(config)
    with pytest.raises(ValueError, match="factor must be > 1"):
        WatchdogSettings.from_config(SimpleNamespace(env={"watchdog": {"factor": 1}}))
    assert WatchdogSettings.from_config(SimpleNamespace(env={})).factor == 5


def test_the_heartbeat_says_what_the_guardian_needs(tmp_path):
    dog, _ = make(tmp_path)
    dog._beat()
    beat = json.loads((tmp_path / "heartbeat.json").read_text())
    assert beat["activity"] == "start-up" and beat["stale_after"] > 600 and not beat["done"]
    dog.stop()
    assert json.loads((tmp_path / "heartbeat.json").read_text())["done"]


def answering_worker(tmp_path, monkeypatch, *pids: int) -> tuple[Watchdog, RunProcess]:
    """A watchdog whose run has one reward worker; each probe of it answers alive with the next of `pids`."""
    worker = RunProcess("reward worker 0", None, restartable=True)
    answers = iter(pids)

    def answer(processes, timeout):
        worker.pid, worker.local = next(answers), True
        return [Probe(worker, ALIVE)]

    dog, _ = make(tmp_path)
    monkeypatch.setattr(diagnosis_module, "run_processes", lambda trainer: [worker])
    monkeypatch.setattr(diagnosis_module, "probe", answer)
    return dog, worker


def test_pids_are_learned_while_processes_answer_and_a_restart_makes_a_step_unhealthy(tmp_path, monkeypatch):
    """The census asks for pids at each step (a stopped process cannot tell its own later); a reward worker that
    answers with another pid was restarted by Ray: that step's time is no healthy one (no bound grows from it)."""
    dog, _ = answering_worker(tmp_path, monkeypatch, 101, 202)
    dog.ready()
    dog._check(time.monotonic())
    assert dog.diagnosis.known["reward worker 0"] == (101, True) and not dog.census_due
    dog.step_begin(1)
    age(dog, 2)
    dog.step_begin(2)
    age(dog, 3)
    dog._check(time.monotonic())  # pid 202: restarted during step 2
    dog.step_begin(3)
    assert dog.diagnosis.known["reward worker 0"] == (202, True) and dog.bound("step") == near(10)  # step 1's 2 s stand in


def test_a_restart_the_watchdog_ordered_warms_up_its_own_step_only_not_the_step_its_new_pid_is_learned_in(
        tmp_path, monkeypatch):
    """The watchdog restarts a stopped reward worker in step 3: step 3 warms up. Ray's new worker answers the census
    only in step 6 (busy, or a census every 15 s while steps take 0.5 s): that is the same restart, and step 6 keeps
    the warm steps' bound (CI at 75ac890: counted again there, a tiny run's 5-s bound became 54 s). A restart Ray made
    unasked (a new pid in step 7) still warms up the step it is learned in."""
    dog, worker = answering_worker(tmp_path, monkeypatch, 101, 202, 303)
    killed = []
    monkeypatch.setattr(diagnosis_module, "kill", lambda process: killed.append(process.role))
    age(dog, 30)
    dog.ready()  # 30 s of start-up: a step that warms up is bound by 4 x 30 s
    dog._check(time.monotonic())
    assert dog.diagnosis.known["reward worker 0"] == (101, True)
    for step in (1, 2, 3):
        dog.step_begin(step)
        age(dog, 2)
    warm = dog.bound("step")
    assert warm == near(10)  # 4 x 2 s, at least min_seconds
    dog.diagnosis.restart([Probe(worker, SILENT, "stopped", stopped=True)])  # what _diagnose does for a stopped one
    dog._recovered("reward worker 0: hung; restarted by Ray")
    assert killed == ["reward worker 0"] and dog.bound("step") == near(120)  # step 3 warms up
    for step in (4, 5, 6):
        dog.step_begin(step)
        age(dog, 2)
    dog.census_next = 0.0
    dog._check(time.monotonic())  # pid 202, the restart ordered in step 3
    assert dog.diagnosis.known["reward worker 0"] == (202, True) and not dog.diagnosis.restarting
    assert dog.bound("step") == near(warm) and not dog.activities.warming
    dog.step_begin(7)
    age(dog, 2)
    dog._check(time.monotonic())  # pid 303: Ray restarted it unasked
    assert dog.diagnosis.known["reward worker 0"] == (303, True) and dog.activities.warming
