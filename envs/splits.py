"""Seed ranges for the train, validation and evaluation splits.

Reasoning Gym generates item i of a dataset seeded s with `Random(s + i)`, so seed s+1 item i equals seed s item i+1.
We never hand Reasoning Gym small neighbouring seeds: every item gets its own integer seed from a range reserved for
its split and the user's seed, so two splits (or two user seeds) can only share an item if the task's question space
is so small that different seeds produce the same question.
"""

from __future__ import annotations

SPLITS = ("train", "validation", "evaluation")
POSITIONS_PER_SEED = 1 << 32  # items one (split, seed) stream can draw before it would reach the next seed's range
SEEDS_PER_SPLIT = 1 << 26
_SPLIT_BASE = {name: index * SEEDS_PER_SPLIT * POSITIONS_PER_SEED for index, name in enumerate(SPLITS)}


def check_split(split: str) -> str:
    """Returns `split` if known; else raises ValueError listing the splits."""
    if split not in _SPLIT_BASE:
        raise ValueError(f"unknown split '{split}': use one of {', '.join(SPLITS)}")
    return split


def item_seed(split: str, seed: int, position: int) -> int:
    """Returns the Reasoning Gym seed of the item at `position` of the (split, seed) stream.

    Ranges: split `k` owns [k * 2^58, (k + 1) * 2^58); inside it, user seed `s` owns [s * 2^32, (s + 1) * 2^32).
    """
    check_split(split)
    if not 0 <= seed < SEEDS_PER_SPLIT:
        raise ValueError(f"seed {seed} out of range: use 0 <= seed < {SEEDS_PER_SPLIT}")
    if not 0 <= position < POSITIONS_PER_SEED:
        raise ValueError(f"position {position} out of range: a stream holds {POSITIONS_PER_SEED} items per seed")
    return _SPLIT_BASE[split] + seed * POSITIONS_PER_SEED + position


def split_of_seed(value: int) -> str:
    """Returns the split whose range holds an item seed (used by checks that evaluation never reads training seeds)."""
    index = value // (SEEDS_PER_SPLIT * POSITIONS_PER_SEED)
    if not 0 <= index < len(SPLITS):
        raise ValueError(f"item seed {value} is outside every split's range")
    return SPLITS[index]
