"""Reasoning Gym tasks whose scorers or generators misbehave, for the isolation and producer tests (loaded via
RG_GRPO_TASK_MODULES)."""

import signal
import time
from dataclasses import dataclass
from typing import Optional

from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS, register_dataset


@dataclass
class MisbehavingConfig:
    seed: Optional[int] = None
    size: int = 10
    hang: bool = False  # HangingGenerator: every item hangs


class _Base(ProceduralDataset):
    def __init__(self, config: MisbehavingConfig):
        super().__init__(config=config, seed=config.seed, size=config.size)

    def __getitem__(self, idx):
        return {"question": f"Say {idx}.", "answer": str(idx), "metadata": {"source_dataset": self.name, "source_index": idx}}


class SleepyScorer(_Base):
    name = "test_sleepy_scorer"

    def score_answer(self, answer, entry):
        if answer == "sleep":
            time.sleep(3600)  # a Python-level hang: stopped by the child's timer
        return 1.0 if answer == entry["answer"] else 0.0


class DeafScorer(_Base):
    name = "test_deaf_scorer"

    def score_answer(self, answer, entry):
        if answer == "deaf":  # like C code that never returns to the interpreter: only killing the process stops it
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(3600)
        return 1.0 if answer == entry["answer"] else 0.0


class HangingGenerator(_Base):
    name = "test_hanging_generator"

    def __getitem__(self, idx):
        if self.config.hang:  # a generator stuck for good: only killing its process stops it
            time.sleep(3600)
        return super().__getitem__(idx)


for cls in (SleepyScorer, DeafScorer, HangingGenerator):
    if cls.name not in DATASETS:
        register_dataset(cls.name, cls, MisbehavingConfig)
