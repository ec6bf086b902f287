"""The run's processes by role and their states (training/trainer/processes.py): real Ray actors, and the verl and
TransferQueue names the registry and the watchdog read (contract tests: they fail when an upgrade moves them)."""

import inspect
import os
import signal

import psutil
import pytest

from training.trainer.processes import ALIVE, DEAD, SILENT, RunProcess, kill, probe, ray_reason


def test_probe_survives_the_clock_passing_its_deadline_between_two_readings(monkeypatch):
    """The probe that the watchdog and the fault report use waits in slices up to a deadline. When the clock passes
    the deadline between the loop's check and the slice's length, the slice must not come out negative: Ray refuses
    that with a ValueError (seen once in CI, in the real-actor test below). A fake clock puts that crossing on every
    run."""
    from types import SimpleNamespace

    import training.trainer.processes as processes

    readings = iter([0.0, 0.9999999, 1.0000001, 1.5, 2.0, 2.5])
    monkeypatch.setattr(processes, "time", SimpleNamespace(monotonic=lambda: next(readings)))

    def wait(pending, num_returns, timeout):
        if timeout < 0:
            raise ValueError(f"The 'timeout' argument must be nonnegative. Received {timeout}")
        return [], pending

    monkeypatch.setattr(processes.ray, "wait", wait)
    monkeypatch.setattr(processes.ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "node"))
    handle = SimpleNamespace(__ray_call__=SimpleNamespace(remote=lambda fn: object()))
    [silent] = probe([RunProcess("rollout server 0", handle)], timeout=1.0)
    assert silent.state == SILENT


@pytest.mark.slow
@pytest.mark.serial  # "busy" is CPU time used during the probe: a loaded machine starves the spinning actor
def test_probe_tells_alive_dead_stopped_and_busy_actors_apart():
    import ray

    @ray.remote(num_cpus=0)
    class Worker:
        def spin(self, seconds: float) -> None:
            import time

            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                pass

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        alive, dead, stopped, busy = (RunProcess(role, Worker.remote()) for role in
                                      ("reward worker 0", "training rank 0", "rollout server 0", "training rank 1"))
        first = probe([alive, dead, stopped, busy], timeout=60)
        assert [p.state for p in first] == [ALIVE] * 4 and all(p.process.local and p.process.pid for p in first)
        ray.kill(dead.handle)  # asynchronous: a probe sent before the kill lands is answered (a loaded CI once)
        try:
            psutil.Process(dead.pid).wait(timeout=60)
        except psutil.NoSuchProcess:
            pass
        os.kill(stopped.pid, signal.SIGSTOP)
        busy.handle.spin.remote(60)  # a synchronous actor answers only between its calls
        states = {p.process.role: p for p in probe([alive, dead, stopped, busy], timeout=3)}
        assert states["reward worker 0"].state == ALIVE
        assert states["training rank 0"].state == DEAD
        assert states["rollout server 0"].state == SILENT and states["rollout server 0"].stopped
        assert "stopped" in states["rollout server 0"].describe() and f"pid {stopped.pid}" in \
            states["rollout server 0"].describe()
        assert states["training rank 1"].state == SILENT and states["training rank 1"].busy
        kill(stopped)  # SIGKILL ends a stopped process
        assert probe([stopped], timeout=30)[0].state == DEAD
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_a_restarted_actor_that_then_stops_is_read_through_its_new_process():
    """Ray restarts a killed reward worker in a new process; when that one is stopped before any probe learnt its pid,
    the probe finds it through Ray's actor table and names it stopped, not "gone (restarting?)" forever."""
    import time

    import ray
    from ray._private.state import actors

    @ray.remote(num_cpus=0, max_restarts=1)
    class Worker:
        pass

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        worker = RunProcess("reward worker 0", Worker.remote(), restartable=True)
        assert probe([worker], timeout=60)[0].state == ALIVE
        first = worker.pid
        os.kill(first, signal.SIGKILL)
        deadline, info = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            info = actors(worker.handle._actor_id.hex())
            if info.get("State") == "ALIVE" and info.get("Pid") not in (0, first):
                break
            time.sleep(0.2)
        restarted = int(info["Pid"])
        assert restarted != first and worker.pid == first  # the probe still holds the dead process's pid
        os.kill(restarted, signal.SIGSTOP)
        found = probe([worker], timeout=3)[0]
        assert found.state == SILENT and found.stopped and worker.pid == restarted, found.describe()
        os.kill(restarted, signal.SIGCONT)
    finally:
        ray.shutdown()


def test_ray_reason_keeps_the_exit_detail_without_the_boilerplate():
    text = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
            "detail: Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
            "include: (1) the process was killed by the OOM killer due to high memory usage")
    assert ray_reason(RuntimeError(text)) == ("its process exited (Worker unexpectedly exits with a connection error "
                                              "code 2. End of file.)")
    assert ray_reason(RuntimeError("The actor died unexpectedly before finishing this task.\nmore")) == \
        "The actor died unexpectedly before finishing this task."


def test_contract_the_names_the_registry_reads():
    """training/trainer/processes.py lists the run's actors from these verl and TransferQueue attributes; the
    watchdog reads verl's timing dict and replay buffer tables. A read of a name, not a patch: this pins it."""
    from transfer_queue import interface
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.single_controller.ray.base import RayWorkerGroup
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.workers.rollout.llm_server import LLMServerManager
    from verl.workers.rollout.replica import RolloutReplica

    assert isinstance(RayWorkerGroup.workers, property)
    assert "self.servers: list[ActorHandle] = []" in inspect.getsource(RolloutReplica.__init__)
    assert "def get_replicas" in inspect.getsource(LLMServerManager)
    assert "self.global_load_balancer = " in inspect.getsource(LLMServerManager)
    assert "self.agent_loop_workers" in inspect.getsource(AgentLoopManager)
    init = inspect.getsource(interface.init)
    assert 'name="TransferQueueController", namespace="transfer_queue"' in init
    assert "_TQ_STORAGE" in inspect.getsource(interface._maybe_create_tq_storage) and hasattr(interface, "_TQ_STORAGE")
    assert '"SimpleStorage"' in inspect.getsource(interface.close)
    buffer_init = inspect.getsource(ReplayBuffer.__init__)
    for table in ("self.partitions", "self.running_keys", "self.finished_keys", "self.failure_keys"):
        assert table in buffer_init, table
    fit = inspect.getsource(PPOTrainer.fit)
    assert "self.timing_raw = {}" in fit and "self.on_step_begin()" in fit and "self._save_checkpoint()" in fit
    assert fit.index("batch = self.step(") < fit.index("self._save_checkpoint()") < fit.index("self.on_step_end()")
