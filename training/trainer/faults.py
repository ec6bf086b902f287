"""What a run does when one of its processes dies: recover where that loses nothing, else stop and name the cause.

- Reward workers (verl's `RewardLoopWorker` actors, rule-based scoring) hold no state a restart loses, so they are
  restartable: Ray restarts a killed one (up to REWARD_WORKER_RESTARTS times) and retries the scoring calls it had in
  flight, so no response is lost or scored 0 because its scorer died. verl creates them without restart options and
  offers no hook for it; `RestartingRewardLoopManager` sets them (a patch named in docs/architecture.md, pinned by
  tests/training/trainer/test_faults.py), installed in the TaskRunner process by training.trainer.trainer.
- Samples verl drops because their session failed are counted per step (`reliability/failed_samples`); a step that
  loses more than `env.reliability.max_failed_fraction` of its batch stops the run (FailedSamples).
- When a step (or anything in fit) raises, `dead_processes` asks every process of the run whether it lives
  (training/trainer/processes.py), so the error names what died by its role ("training rank 0") rather than verl's
  downstream symptom (e.g. its replay buffer's "no materializable trajectories") or Ray's generic text.
- The first fault of a run (a death named there, a hang named by training/trainer/watchdog.py or by the launching
  side's guardian) is written to `<logs>/fault.json` (`write_fault`); later symptoms of the same fault do not
  overwrite it.
- In the driver, `explain` turns the fault record (else the error that ended `fit`) into the console's lines: what
  died or hung (or that the disk is full), where the whole traceback is, and the command that resumes from the last
  complete checkpoint.
"""

from __future__ import annotations

import errno
import shutil
import time
from pathlib import Path

import ray
import ray.util.scheduling_strategies
from verl.experimental.reward_loop import reward_loop as verl_reward_loop

from training.trainer.progress import read_fault, resume_command

REWARD_WORKER_RESTARTS = 3  # per worker; past that its calls fail and the failed-sample check stops the run
PING_SECONDS = 10.0
DISK_WORDS = ("No space left on device", "unexpected pos", "Disk quota exceeded", "file write failed")


class FailedSamples(RuntimeError):
    """A step lost more samples than env.reliability.max_failed_fraction allows."""


class RestartingRewardLoopManager(verl_reward_loop.RewardLoopManager):
    """verl's RewardLoopManager whose reward workers Ray restarts, retrying their in-flight calls."""

    def _init_reward_loop_workers(self):
        """verl's loop (one worker per reward.num_workers, round-robin over the nodes with CPUs), with two changes:
        Ray restarts the workers, and their constructor arguments are objects this manager holds. A restart re-runs
        __init__ with the creation arguments, and the config (over Ray's 100 KiB inline limit, so put in the object
        store for the first creation) had been freed by then: the restarted worker died with
        ReferenceCountingAssertionError and every retried call with it."""
        self.reward_loop_workers_class = ray.remote(max_restarts=REWARD_WORKER_RESTARTS, max_task_retries=-1)(
            verl_reward_loop.RewardLoopWorker)
        self._held_worker_args = (ray.put(self.config), ray.put(self.reward_router_address))
        nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"] and node["Resources"].get("CPU", 0) > 0]
        self.reward_loop_workers = [
            self.reward_loop_workers_class.options(
                name=f"reward_loop_worker_{i}",
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=nodes[i % len(nodes)], soft=True),
            ).remote(*self._held_worker_args)
            for i in range(self.config.reward.num_workers)
        ]


def install_restartable_reward_workers() -> None:
    """Makes verl's v1 trainer build RestartingRewardLoopManager (it looks the name up in its module at init)."""
    from verl.trainer.ppo.v1 import trainer_base

    trainer_base.RewardLoopManager = RestartingRewardLoopManager


def failed_samples(expected: int, trained: int) -> int:
    """Samples a step sampled but does not train on (verl pads failed sessions out of the batch)."""
    return max(0, expected - trained)


def check_failed_samples(failed: int, expected: int, max_fraction: float, dead: list[str]) -> None:
    """Raises FailedSamples when `failed` of `expected` exceeds `max_fraction`, naming `dead` actors if any."""
    if expected and failed / expected > max_fraction:
        cause = f"; dead: {', '.join(dead)}" if dead else "; no rollout server or reward worker is dead (see the logs)"
        raise FailedSamples(f"this step lost {failed} of its {expected} samples (their sessions failed) > "
                            f"env.reliability.max_failed_fraction={max_fraction:g}{cause}. The step was not "
                            "trained on a short batch; fix the cause and resume")


def dead_processes(trainer, settle_rounds: int = 2) -> list[str]:
    """Asks every process of the run whether it lives; returns a description of each dead one, by its role.

    A process killed a moment ago can still be silent or answer "unavailable" (Ray has not yet seen its death): the
    silent ones are asked again, a second apart, up to `settle_rounds` times, so that one error names every process
    that died with it."""
    from training.trainer.processes import DEAD, SILENT, probe, run_processes

    results = probe(run_processes(trainer), PING_SECONDS)
    for _ in range(settle_rounds):
        silent = [i for i, result in enumerate(results) if result.state == SILENT]
        if not silent:
            break
        time.sleep(1.0)
        for i, again in zip(silent, probe([results[i].process for i in silent], PING_SECONDS)):
            results[i] = again
    return [result.describe() for result in results if result.state == DEAD]


def is_disk_full(err: BaseException) -> bool:
    """True when `err` (or what it wraps, also as Ray's text) says the disk is full."""
    text = str(err)
    seen = err
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        seen = seen.__cause__ or seen.__context__
    return any(word in text for word in DISK_WORDS)


def fault_summary(err: BaseException) -> str:
    """The line of an error that says what failed: one naming what died or was lost, else its last line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    named = next(([line for line in lines if marker in line.lower()] for marker in ("dead:", "lost ", "died")
                  if any(marker in line.lower() for line in lines)), [])
    return (named or lines or [type(err).__name__])[-1][:600]


def explain(err: BaseException, checkpoint_dir: str, argv: list[str] | None = None, logs: Path | None = None,
            worker_log: Path | None = None) -> str:
    """The console's fault lines: what stopped training (the recorded fault first), where the whole traceback is,
    and the command that resumes it."""
    where = Path(checkpoint_dir)
    record = read_fault(logs) if logs else None
    named = record if record and record["kind"] != "error" else None  # what died or hung, by the trainer's probe
    if named:
        cause = named["text"]
    elif is_disk_full(err) or (record and is_disk_full(RuntimeError(record["text"]))):
        probe = next((p for p in (where, *where.parents) if p.exists()), Path("."))
        usage = shutil.disk_usage(probe)
        cause = (f"the disk holding {where} is full ({usage.free / 2**20:.0f} MiB free of {usage.total / 2**30:.1f} "
                 "GiB) while a checkpoint was written; free space there (or point trainer.default_local_dir at a "
                 "larger disk, lower trainer.max_actor_ckpt_to_keep), then resume. The half-written step is not "
                 "resumed from: latest_checkpointed_iteration.txt still names the last complete one")
    elif record:  # the trainer's own error, recorded before its tear-down (which may not have ended)
        cause = record["text"]
    elif isinstance(err, ray.exceptions.RayActorError) and "TaskRunner" in str(err):
        from training.trainer.processes import ray_reason

        pid = next((line.split(":", 1)[1].strip() for line in str(err).splitlines() if line.strip().startswith("pid:")),
                   None)
        cause = f"the trainer (Ray's task runner{f', pid {pid}' if pid else ''}) died: {ray_reason(err)}"
    else:
        cause = fault_summary(err)
    lines = [f"[fault] training stopped: {cause}"]
    if logs:
        details = (record or {}).get("details")
        lines.append(f"[fault] whole traceback: {Path(logs) / 'error.log'}"
                     + (f"; the trainer's stacks at the hang: {details}" if details else "")
                     + (f"; full log of that worker: {worker_log}" if worker_log and not named else ""))
    lines.append(f"[fault] to resume from the last checkpoint: {resume_command(argv)}")
    return "\n".join(lines)
