"""Which split a question belongs to, and where each split draws its candidate seeds from.

Two guards keep train, validation and evaluation apart:
1. Seeds. Reasoning Gym generates item i of a dataset seeded s with `Random(s + i)`, so seed s+1 item i equals seed s
   item i+1. Each (split, user seed) stream therefore owns its own range of item seeds, far from every other.
2. Questions. Tasks with small question spaces (jugs has a few hundred questions, lcm a few thousand) repeat questions
   under any seeds. So every question is owned by exactly one split, by a hash of its text: train owns 3/4 of the
   hash space, validation and evaluation 1/8 each. A split keeps only candidates it owns (train skips 1/4 of them;
   validation and evaluation generate ~8 candidates per item), which makes the question sets disjoint by construction.
"""

from __future__ import annotations

import hashlib

SPLITS = ("train", "validation", "evaluation")
_OWNED_UPTO = {"train": 0.75, "validation": 0.875, "evaluation": 1.0}  # cumulative share of the question-hash space

MAX_POSITIONS = 1 << 32  # items one (split, seed) stream can hold
MAX_ATTEMPTS = 1 << 8  # candidates tried per item before giving up (validation needs ~8 on average)
SEEDS_PER_SPLIT = 1 << 20
_INDEX_SPACE = MAX_POSITIONS * MAX_ATTEMPTS  # candidate indices per (split, seed): attempt * 2^32 + position
_SPLIT_SPAN = SEEDS_PER_SPLIT * _INDEX_SPACE


def check_split(split: str) -> str:
    """Returns `split` if known; else raises ValueError listing the splits."""
    if split not in _OWNED_UPTO:
        raise ValueError(f"unknown split '{split}': use one of {', '.join(SPLITS)}")
    return split


def check_seed(seed: int) -> int:
    """Returns `seed` if it is a valid user seed; else raises ValueError with the range."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < SEEDS_PER_SPLIT:
        raise ValueError(f"seed must be an integer in [0, {SEEDS_PER_SPLIT}), got {seed!r}")
    return seed


def item_seed(split: str, seed: int, position: int, attempt: int = 0) -> int:
    """Returns the Reasoning Gym seed of candidate `attempt` for `position` of the (split, seed) stream.

    Split k owns [k * 2^60, (k + 1) * 2^60); user seed s owns a 2^40-wide block inside it; candidates of one attempt
    are contiguous in position, so Reasoning Gym datasets can be built per chunk of positions.
    """
    check_split(split)
    check_seed(seed)
    if not 0 <= position < MAX_POSITIONS:
        raise ValueError(f"position {position} out of range: a stream holds {MAX_POSITIONS} items")
    if not 0 <= attempt < MAX_ATTEMPTS:
        raise ValueError(f"attempt {attempt} out of range [0, {MAX_ATTEMPTS})")
    return SPLITS.index(split) * _SPLIT_SPAN + seed * _INDEX_SPACE + attempt * MAX_POSITIONS + position


def question_hash(question: str) -> float:
    """Returns a process-independent hash of a question in [0, 1)."""
    digest = hashlib.blake2b(question.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") / float(1 << 64)


def question_owner(question: str) -> str:
    """Returns the split that owns a question text."""
    value = question_hash(question)
    return next(split for split in SPLITS if value < _OWNED_UPTO[split])
