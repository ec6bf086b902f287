"""What we know about Reasoning Gym's tasks: names, categories, configs, and the hazards each one carries.

Everything that checks a task name or a task config goes through here, so every error reads the same way.
"""

from __future__ import annotations

import dataclasses
import difflib
from functools import lru_cache
from typing import Any

from reasoning_gym.factory import DATASETS, create_curriculum, has_curriculum

# Keys we own: Reasoning Gym configs have them too, but the stream sets them per item.
RESERVED_CONFIG_KEYS = frozenset({"seed", "size"})

# Generators that iterate over sets of strings (codeio: some of the snippets it runs): their items change with
# PYTHONHASHSEED (measured on 0.1.25; codeio's validation item 6 at seed 0 under hash seed 3), so they are generated
# in a helper process started with PYTHONHASHSEED=0 (see envs.producer).
HASH_SENSITIVE_TASKS = frozenset(
    {"codeio", "isomorphic_strings", "knight_swap", "polynomial_multiplication", "ransom_note", "word_ladder"}
)
# Generators slower than ~100 items/s on one core: produced ahead in background processes.
SLOW_TASKS = frozenset(
    {
        "knight_swap", "futoshiki", "number_sequence", "zebra_puzzles", "puzzle24", "sokoban",
        "intermediate_integration", "quantum_lock", "sudoku", "countdown",
    }
)
# Tasks whose item is not a task of its own: refused in mixes.
REFUSED_TASKS = {"composite": "build a mix in YAML instead; the stream is the composite"}


def all_tasks() -> list[str]:
    """Returns every Reasoning Gym task name a mix may use, sorted."""
    return sorted(name for name in DATASETS if name not in REFUSED_TASKS)


def check_task_name(name: str, where: str = "") -> str:
    """Returns `name` if it is a usable task; else raises ValueError naming the closest task names."""
    if name in REFUSED_TASKS:
        raise ValueError(f"{where}task '{name}' cannot be used here: {REFUSED_TASKS[name]}")
    if name not in DATASETS:
        close = difflib.get_close_matches(str(name), all_tasks(), n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else "see `python -m envs.tasks` for the list"
        raise ValueError(f"{where}unknown Reasoning Gym task '{name}': {hint}")
    return name


def task_category(name: str) -> str:
    """Returns the task's category: its module under reasoning_gym (e.g. 'arithmetic')."""
    dataset_cls, _ = DATASETS[check_task_name(name)]
    return dataset_cls.__module__.split(".")[1]


def tasks_in_category(category: str) -> list[str]:
    """Returns every task of a category, sorted; raises ValueError naming the known categories."""
    tasks = [name for name in all_tasks() if task_category(name) == category]
    if not tasks:
        known = sorted({task_category(n) for n in all_tasks()})
        raise ValueError(f"unknown task category '{category}'; known: {', '.join(known)}")
    return tasks


@lru_cache(maxsize=None)
def config_fields(name: str) -> tuple[str, ...]:
    """Returns the keyword arguments the task's config dataclass accepts, without seed and size."""
    _, config_cls = DATASETS[check_task_name(name)]
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.name not in RESERVED_CONFIG_KEYS)


def validate_task_config(name: str, config: dict[str, Any], where: str = "") -> dict[str, Any]:
    """Checks a task config against its dataclass and its own `validate()`; returns it as a plain dict.

    Raises ValueError naming the task and the bad key (with close matches) or Reasoning Gym's complaint.
    """
    config = dict(config or {})
    fields = config_fields(name)
    for key in config:
        if key in RESERVED_CONFIG_KEYS:
            raise ValueError(f"{where}task '{name}': config key '{key}' is set by the stream per split; remove it")
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=3, cutoff=0.5)
            hint = f"did you mean {', '.join(repr(c) for c in close)}?" if close else f"valid keys: {', '.join(fields)}"
            raise ValueError(f"{where}task '{name}': unknown config key '{key}': {hint}")
    _, config_cls = DATASETS[name]
    try:
        instance = config_cls(**config)
        if hasattr(instance, "validate"):
            instance.validate()
    except Exception as exc:  # Reasoning Gym raises AssertionError/ValueError/TypeError with its own text
        raise ValueError(f"{where}task '{name}': invalid config {config}: {type(exc).__name__}: {exc}") from exc
    return config


if __name__ == "__main__":
    for task in all_tasks():
        print(f"{task_category(task):12s} {task}")


def max_level(task: str) -> int:
    """Returns the highest level of the task's Reasoning Gym curriculum (the longest attribute's last index)."""
    return max(len(attr.levels) - 1 for attr in create_curriculum(task).attributes.values())


def check_level(task: str, level: Any, where: str = "") -> int:
    """Returns `level` if the task has a curriculum and the level is in range; else raises ValueError."""
    if not has_curriculum(task):
        raise ValueError(f"{where}task '{task}' has no Reasoning Gym curriculum; remove `level` and set `config`")
    top = max_level(task)
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= top:
        raise ValueError(f"{where}task '{task}': level must be an integer in 0..{top}, got {level!r}")
    return level
