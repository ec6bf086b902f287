"""The processes of a training run, each by its role, and what state each is in.

A fault line must say which process failed in the words of the run ("training rank 0", "rollout server 1"), not in
Ray's ("WorkerDict", "The actor died unexpectedly"). `run_processes` lists the Ray actors the trainer holds, by role;
`probe` asks each one at once for its pid and sorts the answers: alive, dead (Ray says so), or silent (no answer in
time). For a silent process on this node it also reads the operating system's view: stopped (SIGSTOP, a debugger),
idle (no CPU time while silent: blocked), or busy (computing). Generic over verl's rollout replicas: every replica's
`servers` are rollout servers, whatever engine serves them (vLLM on GPUs, the transformers server on a CPU).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import psutil
import ray

ALIVE, DEAD, SILENT = "alive", "dead", "silent"


@dataclass
class RunProcess:
    """One Ray actor of the run."""

    role: str  # e.g. "training rank 0", "rollout server 1"
    handle: object = field(repr=False)  # its Ray actor handle
    restartable: bool = False  # Ray restarts it and retries its calls (the reward workers)
    pid: int | None = None  # last pid it reported (kept for when it stops answering)
    local: bool = False  # on this node, where its pid can be read

    @property
    def kind(self) -> str:
        """The actor's class name as Ray knows it (WorkerDict, TransformersServer, vLLMHttpServer, ...)."""
        descriptor = getattr(self.handle, "_ray_actor_creation_function_descriptor", None)
        return (getattr(descriptor, "class_name", "") or "actor").rsplit(".", 1)[-1]


@dataclass
class Probe:
    """What one process answered (or did not) and, when silent on this node, what the OS says it is doing."""

    process: RunProcess
    state: str  # ALIVE, DEAD or SILENT
    detail: str = ""  # Ray's reason for a dead one; the OS state of a silent one
    stopped: bool = False  # SIGSTOPped or traced
    busy: bool = False  # used CPU time while it did not answer

    def describe(self) -> str:
        pid = f", pid {self.process.pid}" if self.process.pid else ""
        what = {ALIVE: "answers", DEAD: "died", SILENT: "does not answer"}[self.state]
        return f"{self.process.role} ({self.process.kind}{pid}) {what}" + (f": {self.detail}" if self.detail else "")


def run_processes(trainer) -> list[RunProcess]:
    """The run's Ray actors the trainer holds, by role: training ranks (and separate reference / critic ranks),
    rollout servers and their load balancer, agent loop workers, reward workers, the TransferQueue controller and
    storage units. Parts not built yet (during start-up) are left out."""
    found: list[RunProcess] = []
    groups = [("training rank", getattr(trainer, "actor_rollout_wg", None))]
    if getattr(trainer, "ref_policy_wg", None) is not groups[0][1]:
        groups.append(("reference rank", getattr(trainer, "ref_policy_wg", None)))
    groups.append(("critic rank", getattr(trainer, "critic_wg", None)))
    for role, group in groups:
        for rank, handle in enumerate(getattr(group, "workers", None) or []):
            found.append(RunProcess(f"{role} {rank}", handle))
    servers = getattr(trainer, "llm_server_manager", None)
    for index, replica in enumerate(servers.get_replicas() if servers is not None else []):
        for number, handle in enumerate(replica.servers):
            found.append(RunProcess(f"rollout server {index}" + (f".{number}" if len(replica.servers) > 1 else ""),
                                    handle))
    if getattr(servers, "global_load_balancer", None) is not None:
        found.append(RunProcess("rollout load balancer", servers.global_load_balancer))
    agents = getattr(getattr(trainer, "agent_loop_manager", None), "agent_loop_workers", None) or []
    found += [RunProcess(f"agent loop worker {i}", handle) for i, handle in enumerate(agents)]
    rewards = getattr(getattr(trainer, "reward_loop_manager", None), "reward_loop_workers", None) or []
    found += [RunProcess(f"reward worker {i}", handle, restartable=True) for i, handle in enumerate(rewards)]
    found += transfer_queue_processes()
    return found


def transfer_queue_processes() -> list[RunProcess]:
    """TransferQueue's controller (found by its Ray name) and the storage units this process created (read from
    transfer_queue.interface's module state: TransferQueue names them nowhere else; pinned by a contract test)."""
    found = []
    if not ray.is_initialized():
        return found
    try:
        found.append(RunProcess("TransferQueue controller",
                                ray.get_actor("TransferQueueController", namespace="transfer_queue")))
    except (ValueError, RuntimeError):
        pass
    try:
        from transfer_queue import interface

        storage = (getattr(interface, "_TQ_STORAGE", None) or {}).get("SimpleStorage") or {}
    except ImportError:
        storage = {}
    found += [RunProcess(f"TransferQueue storage {i}", handle) for i, handle in enumerate(storage.values())]
    return found


def _whoami(_actor) -> tuple[int, str]:
    return os.getpid(), ray.get_runtime_context().get_node_id()


def probe(processes: list[RunProcess], timeout: float) -> list[Probe]:
    """Asks every process for its pid at once and waits up to `timeout` s; returns one Probe per process.

    A synchronous actor answers only between its calls, so a training rank inside a long update is silent but busy;
    a stopped or blocked one is silent and idle. Updates each process's pid and whether it runs on this node."""
    if not processes:
        return []
    node = ray.get_runtime_context().get_node_id()
    refs = {}
    for process in processes:
        try:
            refs[process.handle.__ray_call__.remote(_whoami)] = process
        except Exception:  # noqa: BLE001 - a handle Ray refuses to call is as good as dead
            refs[None] = process
    cpu_before = {p.pid: _cpu_seconds(p.pid) for p in processes if p.local and p.pid}
    pending, deadline = [ref for ref in refs if ref is not None], time.monotonic() + timeout
    ready: list = []
    while pending and (left := deadline - time.monotonic()) > 0:  # a stopped process need not wait the timeout out
        # one reading of the clock: a second one could fall past the deadline, and Ray refuses a negative timeout
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=min(0.5, left))
        ready += done
        if all(_stopped(refs[ref]) for ref in pending):
            break
    probes = []
    for ref, process in refs.items():
        if ref is None:
            probes.append(Probe(process, DEAD, "Ray refuses calls to it"))
            continue
        if ref not in ready:
            probes.append(_silent(process, cpu_before.get(process.pid)))
            continue
        try:
            process.pid, where = ray.get(ref)
            process.local = where == node
            probes.append(Probe(process, ALIVE))
        except ray.exceptions.ActorUnavailableError:
            probes.append(Probe(process, SILENT, "restarting", busy=True))
        except ray.exceptions.OutOfMemoryError:  # Ray's memory monitor kills workers when the node runs short
            probes.append(Probe(process, DEAD, "killed by Ray's memory monitor: the node ran low on memory"))
        except ray.exceptions.RayError as err:
            probes.append(Probe(process, DEAD, ray_reason(err)))
    return probes


def _silent(process: RunProcess, cpu_before: float | None) -> Probe:
    if not (process.local and process.pid):
        return Probe(process, SILENT, "no answer (on another node, or its pid is unknown)")
    try:
        proc = psutil.Process(process.pid)
        status = proc.status()
    except psutil.Error:
        restarted = _restarted_pid(process)
        if restarted is None:  # Ray restarts it, or will say it is dead: not a culprit of its own
            return Probe(process, SILENT, "no answer, its process is gone (restarting?)", busy=True)
        process.pid, cpu_before = restarted, None  # Ray restarted it: the new process is the one to read
        try:
            status = psutil.Process(process.pid).status()
        except psutil.Error:
            return Probe(process, SILENT, "no answer, its restarted process is gone too (restarting?)", busy=True)
    if status in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
        return Probe(process, SILENT, "its process is stopped (SIGSTOP or a debugger)", stopped=True)
    cpu_after = _cpu_seconds(process.pid)
    if cpu_before is not None and cpu_after is not None and cpu_after - cpu_before > 0.05:
        return Probe(process, SILENT, "busy (it used CPU time meanwhile)", busy=True)
    return Probe(process, SILENT, f"no answer and no CPU time used meanwhile (process state: {status})")


def _restarted_pid(process: RunProcess) -> int | None:
    """The pid of the process Ray restarted this actor in (Ray's actor table: the dashboard's state API is off), when
    Ray says it is alive again on this node in another process; else None. A restarted reward worker that then hangs
    would otherwise be read through its dead predecessor's pid forever."""
    actor_id = getattr(process.handle, "_actor_id", None)
    if actor_id is None:
        return None
    try:
        from ray._private.state import actors

        info = actors(actor_id.hex())
    except Exception:  # noqa: BLE001 - a private API: its absence leaves the old reading
        return None
    pid, node = int(info.get("Pid") or 0), (info.get("Address") or {}).get("NodeID")
    alive_here = info.get("State") == "ALIVE" and node == ray.get_runtime_context().get_node_id()
    return pid if alive_here and pid and pid != process.pid else None


def _stopped(process: RunProcess) -> bool:
    try:
        return bool(process.local and process.pid) and psutil.Process(process.pid).status() in (
            psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def _cpu_seconds(pid: int) -> float | None:
    try:
        times = psutil.Process(pid).cpu_times()
        return times.user + times.system
    except psutil.Error:
        return None


def ray_reason(err: BaseException) -> str:
    """A short reason from Ray's actor error: its exit detail, without the OOM-killer boilerplate."""
    text = str(err)
    if "Worker exit detail:" in text:
        detail = text.split("Worker exit detail:", 1)[1].split(" Some common causes", 1)[0].strip()
        return f"its process exited ({detail[:160]})"
    return (text.strip().splitlines() or [type(err).__name__])[0][:200]


def kill(process: RunProcess) -> None:
    """SIGKILLs a process on this node by pid (a stopped one cannot act on Ray's request to exit), else asks Ray.
    A restartable actor is restarted by Ray afterwards; its in-flight calls are retried."""
    if process.local and process.pid:
        try:
            psutil.Process(process.pid).kill()
            return
        except psutil.Error:
            pass
    try:
        ray.kill(process.handle, no_restart=not process.restartable)
    except Exception:  # noqa: BLE001 - already gone
        pass
