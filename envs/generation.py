"""Deterministic generation of one Reasoning Gym entry from (task, config, split, seed, position).

The same arguments give the same entry in any process, because:
- candidates come from the split's own seed range (envs.splits), not from Reasoning Gym's `seed + index` neighbourhood,
  and the entry is the first candidate whose question the split owns;
- the global `random` and numpy's global generator are seeded with the candidate's seed while the generator runs
  (list_functions draws from `random`; codeio runs snippets that draw from both) and restored afterwards;
- generators that depend on PYTHONHASHSEED are run by envs.producer in a process started with PYTHONHASHSEED=0.
"""

from __future__ import annotations

import hashlib
import json
import random
from functools import lru_cache
from typing import Any

import numpy as np
import reasoning_gym

from envs.splits import MAX_ATTEMPTS, item_seed, question_owner

# Reasoning Gym datasets are built for a fixed size (some precompute per-index tables from their seed), so candidates
# are drawn from chunks: a dataset seeded at the chunk's first seed, index = offset inside the chunk. For tasks that use
# `Random(seed + index)` this is exactly `Random(item_seed)`.
CHUNK_SIZE = 4096
# Tasks that hand their seed to numpy, which takes seeds below 2^32 only: their chunk seeds are hashed into that range.
SEED_LIMITED_TASKS = frozenset({"pool_matrix"})


def config_key(config: dict[str, Any]) -> str:
    """Returns a canonical, hashable text for a task config (used as a cache key and in item ids)."""
    return json.dumps(config, sort_keys=True, default=str)


def _fold_to_32_bits(value: int) -> int:
    digest = hashlib.blake2b(value.to_bytes(16, "little"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % ((1 << 32) - CHUNK_SIZE)


@lru_cache(maxsize=256)
def _chunk_dataset(task: str, config_text: str, chunk_seed: int):
    if task in SEED_LIMITED_TASKS:
        chunk_seed = _fold_to_32_bits(chunk_seed)
    return reasoning_gym.create_dataset(task, seed=chunk_seed, size=CHUNK_SIZE, **json.loads(config_text))


def generate_candidate(task: str, config_text: str, value: int) -> dict[str, Any]:
    """Returns the Reasoning Gym entry whose item seed is `value` (no split ownership check)."""
    offset = value % CHUNK_SIZE
    dataset = _chunk_dataset(task, config_text, value - offset)
    saved, saved_numpy = random.getstate(), np.random.get_state()
    random.seed(value)
    np.random.seed(value % (1 << 32))
    try:
        return dataset[offset]
    finally:
        random.setstate(saved)
        np.random.set_state(saved_numpy)


def generate_entry(task: str, config: dict[str, Any], split: str, seed: int, position: int) -> dict[str, Any]:
    """Returns the entry {question, answer, metadata} at `position` of the (split, seed) stream of `task`.

    Raises RuntimeError if no candidate's question belongs to the split (a task with almost no distinct questions).
    """
    config_text = config_key(config)
    for attempt in range(MAX_ATTEMPTS):
        entry = generate_candidate(task, config_text, item_seed(split, seed, position, attempt))
        if question_owner(entry["question"]) == split:
            return entry
    raise RuntimeError(
        f"task '{task}' with config {config_text} gave no question owned by split '{split}' in {MAX_ATTEMPTS} "
        "candidates: its question space is too small for disjoint splits; widen its config"
    )
