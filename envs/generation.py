"""Deterministic generation of one Reasoning Gym entry from (task, config, split, seed, position).

The same arguments give the same entry in any process, because:
- the item's seed comes from the split's own range (envs.splits), not from Reasoning Gym's `seed + index` neighbourhood;
- the global `random` module is seeded with the item's seed while the generator runs (list_functions and a few others
  draw from it) and restored afterwards;
- generators that depend on PYTHONHASHSEED are run by envs.producer in a process started with PYTHONHASHSEED=0.
"""

from __future__ import annotations

import json
import random
from functools import lru_cache
from typing import Any

import reasoning_gym

from envs.splits import item_seed

# Reasoning Gym datasets are built for a fixed size (some precompute per-index tables from their seed), so items are
# drawn from chunks: dataset seeded at the chunk's first item seed, index = offset inside the chunk. For tasks that use
# `Random(seed + index)` this is exactly `Random(item_seed)`.
CHUNK_SIZE = 4096


def config_key(config: dict[str, Any]) -> str:
    """Returns a canonical, hashable text for a task config (used as a cache key and in item ids)."""
    return json.dumps(config, sort_keys=True, default=str)


@lru_cache(maxsize=256)
def _chunk_dataset(task: str, config_text: str, chunk_seed: int):
    return reasoning_gym.create_dataset(task, seed=chunk_seed, size=CHUNK_SIZE, **json.loads(config_text))


def generate_entry(task: str, config: dict[str, Any], split: str, seed: int, position: int) -> dict[str, Any]:
    """Returns the Reasoning Gym entry {question, answer, metadata} at `position` of the (split, seed) stream of `task`."""
    value = item_seed(split, seed, position)
    offset = position % CHUNK_SIZE
    dataset = _chunk_dataset(task, config_key(config), value - offset)
    saved = random.getstate()
    random.seed(value)
    try:
        entry = dataset[offset]
    finally:
        random.setstate(saved)
    return entry
