"""The Ray task runner: verl's TaskRunnerV1 with our trainer importable inside its actor.

verl's `main_ppo` runs TaskRunnerV1 as a Ray actor, and `get_trainer_cls(trainer.v1.trainer_mode)` looks the name
up in that actor's process, where nothing has imported our module. Registering in the driver is not enough. This
subclass lives in an importable module, so Ray imports it (and, through it, training.trainer.trainer) in the actor; `run`
imports it again explicitly before handing over to verl.
"""

from __future__ import annotations

import ray
from verl.trainer.main_ppo import TaskRunnerV1

import training.trainer.trainer  # noqa: F401  (registers the `reasoning_gym` trainer in this process)
from utils.root_logging import import_keeping_root_logging

# verl imports its vLLM server module here when it builds the rollout replicas; vLLM's server would set the root
# logger to ERROR and hide our warnings
import_keeping_root_logging()


class _ReasoningGymTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """verl's TaskRunnerV1; makes sure the trainer registry holds our trainer first, and stops the trainer's
    watchdog once verl's run (its tear-down included) has returned."""

    def run(self, config):
        import training.trainer.trainer  # noqa: F401

        try:
            return super().run(config)
        finally:
            watchdog = getattr(self.trainer, "watchdog", None)
            if watchdog is not None:
                watchdog.stop()


ReasoningGymTaskRunner = ray.remote(_ReasoningGymTaskRunner)
