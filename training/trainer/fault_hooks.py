"""The trainer's side of fault handling, as verl hooks: a mixin for our PPOTrainerSync subclass.

- Tells the watchdog (training/trainer/watchdog.py) where the run is: start-up, each step, a checkpoint save, a
  validation, the shutdown; each edge is progress, and each kind keeps its own slowest healthy duration.
- Gives the producer processes half the current step bound to answer (envs/producer.py), so a hung one is replaced
  before the watchdog's bound is reached.
- Whatever raises in init or fit is re-raised as "... failed; dead: <role> ..." when a process of the run is dead
  (training/trainer/processes.py), and recorded as the run's fault; other errors pass unchanged.
- Counts the samples verl dropped from a training batch (failed sessions) and stops past the threshold
  (training/trainer/faults.py).
Every hook calls verl's own (super()) first or around it.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path

from training.trainer.activity import WatchdogSettings
from training.trainer.faults import FailedSamples, check_failed_samples, dead_processes, failed_samples, fault_summary
from training.trainer.progress import write_fault
from training.trainer.watchdog import Watchdog

logger = logging.getLogger(__name__)


class FaultHooks:
    """Mixin for a verl PPOTrainer: watchdog edges, producer timeouts, naming dead processes, the batch guard."""

    watchdog: Watchdog | None = None
    failed_samples_total = 0
    max_failed_fraction = 0.0

    def _logs_dir(self) -> Path:
        return Path(str(self.config.env.get("logs_dir") or "logs"))

    def init(self):
        self.watchdog = Watchdog(self, WatchdogSettings.from_config(self.config), self._logs_dir()).start()
        with self._naming_dead_processes("start-up"):
            super().init()

    def fit(self, *args, **kwargs):
        failed = True
        try:
            with self._naming_dead_processes(None):
                result = super().fit(*args, **kwargs)
            failed = False
            return result
        except Exception as err:  # recorded before verl's tear-down, which may hang on what failed
            write_fault(self._logs_dir(), "error", fault_summary(err))
            raise
        finally:
            self.watchdog.finish(failed)

    def on_init_end(self):
        super().on_init_end()
        self.watchdog.ready()

    def on_validate_begin(self):
        super().on_validate_begin()
        self.watchdog.enter("validation", f"the validation at step {getattr(self, 'global_steps', 0)}")

    def on_validate_end(self):
        super().on_validate_end()
        self.watchdog.leave()

    def on_step_begin(self):
        self.watchdog.step_begin(self.global_steps)
        stream = getattr(getattr(self, "train_dataset", None), "stream", None)
        if stream is not None:  # the producer's hangs are its own to recover, well inside the watchdog's bound
            stream.set_generation_timeout(self.watchdog.producer_timeout())
        super().on_step_begin()

    def step(self, metrics: dict, timing_raw: dict):
        with self._naming_dead_processes(f"step {self.global_steps}"):
            return super().step(metrics, timing_raw)

    def step_trained(self) -> None:
        """Called at the end of our step(): what fit does next is the checkpoint save, on a save step."""
        save_freq, step = int(self.config.trainer.save_freq), self.global_steps
        if save_freq > 0 and (step >= self.total_training_steps or step % save_freq == 0):
            self.watchdog.enter("save", f"the checkpoint save of step {step}")

    def on_step_end(self):
        if self.watchdog.activities.current.kind == "save":
            self.watchdog.leave()
        with self._naming_dead_processes(f"the weight sync after step {self.global_steps}"):
            super().on_step_end()

    @contextmanager
    def _naming_dead_processes(self, where: str | None):
        """Re-raises an error of the block as "<where> failed; dead: ..." when a process of the run is dead, and
        records it as the run's fault, so the console's [fault] line says what died; other errors (FailedSamples
        included, which names its dead itself) pass unchanged."""
        try:
            yield
        except FailedSamples as err:
            write_fault(self._logs_dir(), "lost samples", str(err))
            raise
        except Exception as err:
            if where is None:  # fit: anything the inner blocks have not named already
                where = f"step {getattr(self, 'global_steps', '?')}"
            try:
                dead = dead_processes(self)
            except Exception:  # noqa: BLE001 - the diagnosis must never hide the step's own error
                logger.warning("could not check which processes are alive", exc_info=True)
                dead = []
            if dead and "; dead: " not in str(err):
                text = f"{where} failed; dead: {'; '.join(dead)}"
                write_fault(self._logs_dir(), "dead", text)
                raise RuntimeError(text) from err
            raise

    def _guard_batch(self, batch, metrics: dict) -> None:
        """Counts the samples of a training batch that verl dropped (failed sessions); stops past the threshold."""
        if batch.partition_id != "train":
            return
        rollout = self.config.actor_rollout_ref.rollout
        expected = int(self.config.data.train_batch_size) * int(rollout.n) // self.parameter_sync_step
        failed = failed_samples(expected, sum(not tag.get("is_padding", False) for tag in batch.tags))
        self.failed_samples_total += failed
        metrics["reliability/failed_samples"] = float(failed)
        metrics["reliability/failed_samples_total"] = float(self.failed_samples_total)
        if failed:
            logger.warning("step %s: %d of %d samples failed", getattr(self, "global_steps", "?"), failed, expected)
            check_failed_samples(failed, expected, self.max_failed_fraction,
                                 dead_processes(self) if failed / expected > self.max_failed_fraction else [])
