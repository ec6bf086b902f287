"""Evaluation items from a config: categories of tasks and weighted composite sets.

Items come from the *evaluation* split of envs (disjoint from train/validation seeds by construction), or, for a suite
with `items: published`, from Reasoning Gym's own datasets as its published evaluations drew them; either way rendered
with the same chat messages as training, and carrying their Reasoning Gym entry to the scorer.
"""

from __future__ import annotations

import hashlib
import logging
import os
import random
from dataclasses import dataclass

from evaluation.config import CompositeConfig, EvalConfig, TaskConfig

SPLIT = "evaluation"
log = logging.getLogger(__name__)


@dataclass
class SuiteItem:
    """One question of the suite; `item_id` is stable across runs (the resume key)."""

    item_id: str  # "<group>/<task key>/<position>"
    group: str  # category name or composite name (the row group in reports)
    task_key: str  # task name in reports
    task: str  # Reasoning Gym dataset name (for scoring)
    entry: dict  # Reasoning Gym entry: question, answer, metadata
    config: dict  # the task config (some scorers read it)
    messages: list  # chat messages (system + user)

    @property
    def result_key(self) -> str:
        """Per-task aggregation key: '<group>/<task key>'."""
        return f"{self.group}/{self.task_key}"


def _messages(question: str, system_prompt: str) -> list:
    from envs.prompts import build_messages

    return build_messages(question, system_prompt)


class SplitLeak(RuntimeError):
    """An evaluation item whose question belongs to another split (would inflate scores of a trained model)."""


def _entry(task: str, config: dict, seed: int, position: int) -> dict:
    """The evaluation split's entry, checked: its question must be owned by the evaluation split."""
    from envs.generation import generate_entry
    from envs.splits import question_owner

    entry = generate_entry(task, config, SPLIT, seed, position)
    owner = question_owner(entry["question"])
    if owner != SPLIT:
        raise SplitLeak(f"{task} evaluation item {position} (seed {seed}) has a question owned by the {owner} split")
    return entry


def published_entries(task: TaskConfig) -> list[dict]:
    """Reasoning Gym's own items of a task: create_dataset(task, seed, size)'s entries in order, as its published
    evaluations generated them (their questions may belong to any split of this project: envs.splits owns none)."""
    import reasoning_gym

    dataset = reasoning_gym.create_dataset(task.task, seed=task.seed, size=task.size, **task.config)
    return [dataset[pos] for pos in range(task.size)]


def task_items(group: str, task: TaskConfig, system_prompt: str, published: bool = False) -> list[SuiteItem]:
    """`task.size` items of one task: at evaluation seed `task.seed`, or Reasoning Gym's own at that seed."""
    items = []
    entries = published_entries(task) if published else None
    for pos in range(task.size):
        entry = entries[pos] if entries else _entry(task.task, task.config, task.seed, pos)
        items.append(SuiteItem(f"{group}/{task.key}/{pos:05d}", group, task.key, task.task, entry, task.config,
                               _messages(entry["question"], system_prompt)))
    return items


def composite_members(comp: CompositeConfig) -> list[int]:
    """Member index for each position: weighted draw with a per-position RNG (order-independent, deterministic)."""
    weights = [m.weight for m in comp.tasks]
    picks = []
    for pos in range(comp.size):
        digest = hashlib.sha256(f"{comp.name}:{comp.seed}:{pos}".encode()).digest()
        rng = random.Random(int.from_bytes(digest[:8], "big"))
        picks.append(rng.choices(range(len(comp.tasks)), weights=weights)[0])
    return picks


def composite_items(comp: CompositeConfig, system_prompt: str) -> list[SuiteItem]:
    """`comp.size` items; item i is member task m's evaluation item at position i (seed `comp.seed`)."""
    items = []
    for pos, idx in enumerate(composite_members(comp)):
        member = comp.tasks[idx]
        entry = _entry(member.task, member.config, comp.seed, pos)
        items.append(SuiteItem(f"{comp.name}/{member.key}/{pos:05d}", comp.name, member.key, member.task, entry,
                               member.config,
                               _messages(entry["question"], system_prompt)))
    return items


def build_suite(cfg: EvalConfig) -> list[SuiteItem]:
    """All items of the suite in a fixed order (categories first, then composites)."""
    from envs.prompts import resolve_system_prompt
    from envs.tasks import HASH_SENSITIVE_TASKS

    used = {t.task for c in cfg.categories for t in c.tasks} | {m.task for c in cfg.composites for m in c.tasks}
    if used & HASH_SENSITIVE_TASKS and os.environ.get("PYTHONHASHSEED") != "0":
        log.warning("tasks %s generate different questions under each PYTHONHASHSEED; run with PYTHONHASHSEED=0 "
                    "(evaluate_model.py does) so that runs to compare see the same items",
                    sorted(used & HASH_SENSITIVE_TASKS))
    system_prompt = resolve_system_prompt(cfg.system_prompt)
    items: list[SuiteItem] = []
    for category in cfg.categories:
        for task in category.tasks:
            try:
                items.extend(task_items(category.name, task, system_prompt, cfg.items == "published"))
            except Exception as err:  # noqa: BLE001 - only published items: a generator that changed since
                if cfg.items != "published":
                    raise
                log.warning("%s/%s left out: this Reasoning Gym cannot draw its published items (%s: %s)",
                            category.name, task.key, type(err).__name__, err)
    for comp in cfg.composites:
        items.extend(composite_items(comp, system_prompt))
    return items


def group_kinds(cfg: EvalConfig) -> dict[str, str]:
    """'category', 'composite' or 'benchmark' for each group name (reports label them; a benchmark group informs and
    stays out of the overall row and the verdict, unless the suite's `benchmarks.in_verdict` makes it a category)."""
    kinds = {c.name: "category" for c in cfg.categories}
    kinds.update({c.name: "composite" for c in cfg.composites})
    if cfg.benchmarks:
        kinds[cfg.benchmarks.group] = "category" if cfg.benchmarks.in_verdict else "benchmark"
    return kinds
