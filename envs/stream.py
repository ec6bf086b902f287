"""The task stream: an endless torch IterableDataset of Reasoning Gym prompts in verl's dataset item format.

Item `position` of a (split, seed) stream is a pure function of those three, the task weights and the task's current
config: the task is picked by a hash of the item seed against the cumulative weights, and the entry is generated from
its own seed (envs.splits). So the stream is the same in every process, under any PYTHONHASHSEED and any number of
dataloader workers (worker `w` of `W` takes positions w, w+W, ...), and its state is just how far it got plus the
curriculum (levels) and the task sampler (weights).

Weights: with the mix's default `sampler: {strategy: uniform}` they are the declared weights, always (the draw is the
same arithmetic as before the sampler existed, so the items are byte-identical). With `strategy: learnability` they are
the sampler's shares at the moment the stream reads the position: a `sampler.update` takes effect from the next
position read after it. Validation and evaluation streams always use the declared weights.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
import logging
import os
import sys
from collections import Counter
from typing import Any, Iterator

import torch
from torch.utils.data import IterableDataset, get_worker_info

from envs.curriculum import Curriculum
from envs.generation import config_key, generate_entry
from envs.mix import Mix, load_mix
from envs.producer import GenerationFailed, Producer
from envs.prompts import DEFAULT_SYSTEM_PROMPT, build_messages, prompt_opens_think, render_prompt, resolve_system_prompt
from envs.sampler import TaskSampler
from envs.splits import check_split, item_seed
from envs.tasks import HASH_SENSITIVE_TASKS, SLOW_TASKS

# 2: the state names its mix (fingerprint), so a resume with another mix is refused. The "sampler" entry (windows of
# the task sampler) was added without a new version: a version-2 state without it can only come from a mix without a
# sampler section (the fingerprint covers a non-uniform sampler), whose draw does not depend on sampler state.
_STATE_VERSION = 2
FRESH_START_HINT = ("to start fresh instead: trainer.resume_mode=disable, or a new trainer.experiment_name, or delete "
                    "the checkpoint folder (trainer.default_local_dir)")
MAX_CONSECUTIVE_FILTERED = 1000  # a mix whose prompts are (almost) all too long is a config error, not a slow stream


def _unit_interval(value: int) -> float:
    """splitmix64 of `value` mapped to [0, 1): a cheap, process-independent hash for the task choice."""
    z = (value + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


def mix_fingerprint(mix: Mix | str | dict) -> str:
    """Returns the sha256 of what in a mix decides which prompts a stream yields, the same in every process.

    Covers the tasks in order (key, task, weight, config, start level; the order and the weights pick the task at each
    position), the curriculum settings (they move the levels) and a non-uniform sampler's settings (they move the
    weights; a uniform sampler adds nothing, so mixes without a sampler keep their fingerprint). Not the file name (a
    copy or a rename is the same mix) and not held_out (validation only). Configs are canonicalised as the stream's own
    item ids are.
    """
    mix = load_mix(mix)
    canonical = {"tasks": [[s.key, s.task, s.weight, s.config, s.level] for s in mix.tasks],
                 "curriculum": dataclasses.asdict(mix.curriculum)}
    if mix.sampler.reweights:
        canonical["sampler"] = dataclasses.asdict(mix.sampler)
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class TaskStream(IterableDataset):
    """Endless prompts from a mix, for one split and seed. See the module docstring for the guarantees.

    Args: mix (Mix, YAML path or mapping); split ("train", "validation", "evaluation"); seed; system_prompt (an RG
    SYSTEM_PROMPTS name or text); tokenizer and max_prompt_length (prompt-length check with the real chat template);
    chat_template_kwargs (the template's options, data.apply_chat_template_kwargs: with a tokenizer, each item's
    extra_info says whether its rendered prompt opened the think block, `prompt_opens_think`, for the reward);
    on_long_prompt ("filter": skip and count, "error": raise); producer_processes (child processes that generate slow
    and PYTHONHASHSEED-sensitive tasks ahead; None = 2 when the mix needs them); lookahead (items asked for ahead).
    """

    def __init__(self, mix: Mix | str | dict, split: str = "train", seed: int = 0,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, tokenizer: Any = None,
                 max_prompt_length: int | None = None, on_long_prompt: str = "filter",
                 producer_processes: int | None = None, lookahead: int = 64,
                 chat_template_kwargs: dict | None = None):
        self.mix = load_mix(mix)
        self.split, self.seed = check_split(split), seed
        item_seed(split, seed, 0)  # validates the seed range now rather than at the first item
        self.system_prompt = resolve_system_prompt(system_prompt)
        if on_long_prompt not in ("filter", "error"):
            raise ValueError(f"on_long_prompt must be 'filter' or 'error', got {on_long_prompt!r}")
        self.tokenizer, self.max_prompt_length, self.on_long_prompt = tokenizer, max_prompt_length, on_long_prompt
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.curriculum = Curriculum(self.mix)
        # validation and evaluation are never reweighted: their sampler is uniform whatever the mix declares
        self.sampler = TaskSampler(self.mix, None if self.split == "train" else dataclasses.replace(
            self.mix.sampler, strategy="uniform"))
        self.mix_fingerprint = mix_fingerprint(self.mix)
        self.stats: Counter = Counter()  # e.g. "filtered_long_prompt/<task>"
        self._cumulative = list(itertools.accumulate(spec.weight for spec in self.mix.tasks))
        self._routed = self._routed_keys(producer_processes)
        self._processes = 0 if not self._routed else (producer_processes or min(2, os.cpu_count() or 1))
        self.lookahead = lookahead
        self._producer: Producer | None = None
        self._generation_timeout: float | None = None  # None: the producer's default
        self._consumed = 0  # positions of this shard already read (items yielded or filtered)

    def _routed_keys(self, producer_processes: int | None) -> set[str]:
        needs_fixed_hash = sys.flags.hash_randomization != 0
        sensitive = {s.key for s in self.mix.tasks if s.task in HASH_SENSITIVE_TASKS and needs_fixed_hash}
        if producer_processes == 0:
            if sensitive:
                raise ValueError(
                    f"tasks {sorted(sensitive)} depend on PYTHONHASHSEED and must be generated in a producer process: "
                    "set producer_processes >= 1 (or run with PYTHONHASHSEED=0)"
                )
            return set()
        return sensitive | {s.key for s in self.mix.tasks if s.task in SLOW_TASKS}

    # ----- what sits at a position
    def task_at(self, position: int) -> str:
        """Returns the mix key drawn at `position` under the weights in effect now (independent of curriculum levels).

        The same hash of the item seed is compared with the cumulative weights: the declared ones (uniform sampler),
        or the sampler's current shares (learnability), which change only when the sampler is updated."""
        cumulative = self.sampler.cumulative() if self.sampler.reweights else self._cumulative
        u = _unit_interval(item_seed(self.split, self.seed, position)) * cumulative[-1]
        return self.mix.tasks[min(bisect.bisect_right(cumulative, u), len(cumulative) - 1)].key

    def _request(self, position: int) -> tuple[str, dict, tuple, tuple]:
        key = self.task_at(position)
        config = self.curriculum.config_for(key)
        args = (self.mix.task(key).task, config, self.split, self.seed, position)
        return key, config, (position, config_key(config)), args

    def _fetch(self, key: str, request_key: tuple, args: tuple) -> dict:
        if key in self._routed:
            return self._ensure_producer().get(request_key, args)
        return generate_entry(*args)

    def entry_at(self, position: int) -> tuple[str, dict, dict]:
        """Returns (mix key, config, RG entry) at `position` under the current curriculum levels."""
        key, config, request_key, args = self._request(position)
        return key, config, self._fetch(key, request_key, args)

    def item_at(self, position: int) -> dict[str, Any] | None:
        """Returns the verl dataset item at `position`, or None if its prompt is too long and filtered, or if a producer
        could not generate it (it raised, hung or killed its process: counted as generation_failed/<task>)."""
        key, config, request_key, args = self._request(position)
        try:
            entry = self._fetch(key, request_key, args)
        except GenerationFailed as err:
            self.stats[f"generation_failed/{key}"] += 1
            logging.getLogger(__name__).warning("skipped %s at %s position %d: %s", key, self.split, position,
                                                str(err).splitlines()[0])
            return None
        spec = self.mix.task(key)
        messages = build_messages(entry["question"], self.system_prompt)
        rendered = None if self.tokenizer is None else render_prompt(self.tokenizer, messages, self.chat_template_kwargs)
        if rendered is not None and self.max_prompt_length:
            length = len(self.tokenizer.encode(rendered, add_special_tokens=False))
            if length > self.max_prompt_length:
                if self.on_long_prompt == "error":
                    raise ValueError(
                        f"prompt of task '{key}' at {self.split} position {position} has {length} tokens > "
                        f"max_prompt_length={self.max_prompt_length}: raise data.max_prompt_length, make the task "
                        "easier in the mix, or set on_long_prompt=filter"
                    )
                self.stats[f"filtered_long_prompt/{key}"] += 1
                return None
        level = self.curriculum.levels().get(key)
        extra_info = {"entry": entry, "task": key, "task_name": spec.task, "config": config,
                      "config_text": request_key[1], "level": level,
                      "split": self.split, "seed": self.seed, "position": position, "index": position}
        if rendered is not None:
            extra_info["prompt_opens_think"] = prompt_opens_think(rendered)
        return {
            "raw_prompt": messages,
            "data_source": f"reasoning_gym/{spec.task}",
            "reward_model": {"style": "rule", "ground_truth": entry["answer"]},
            "extra_info": extra_info,
            "index": position,
            "tools_kwargs": {},
            "interaction_kwargs": {},
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
        }

    # ----- iteration, sharding, prefetch
    def _shard(self) -> tuple[int, int]:
        info = get_worker_info()
        if info is None:
            return 0, 1
        if self.mix.curriculum.enabled or self.sampler.reweights:
            raise RuntimeError(
                "a curriculum or a learnability sampler needs the stream in the trainer process: set "
                "data.dataloader_num_workers=0 (slow tasks are still generated ahead in envs' producer processes)"
            )
        return info.id, info.num_workers

    def _ensure_producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self._processes, on_respawn=self._count_respawn)
            if self._generation_timeout is not None:
                self._producer.timeout_s = self._generation_timeout
        return self._producer

    def set_generation_timeout(self, seconds: float) -> None:
        """Seconds a producer process may take to answer before it counts as hung and is replaced (the trainer sets
        it from its step bound; envs.producer.GENERATION_TIMEOUT_S otherwise)."""
        self._generation_timeout = float(seconds)
        if self._producer is not None:
            self._producer.timeout_s = self._generation_timeout

    def _count_respawn(self, hung: bool = False) -> None:
        # cumulative over the run: stats are saved and restored with the stream
        self.stats["producer_respawns"] += 1
        if hung:
            self.stats["producer_hangs"] += 1

    def _prefetch(self, positions: range) -> None:
        for position in positions:
            key, _, request_key, args = self._request(position)
            if key in self._routed:
                self._ensure_producer().prefetch(request_key, args)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        shard, shards = self._shard()
        filtered_in_a_row, prefetched_to = 0, 0
        while True:
            position = shard + self._consumed * shards
            if self._routed:  # keep `lookahead` positions asked for; a curriculum change re-asks at `get`
                horizon = position + self.lookahead * shards
                self._prefetch(range(max(position, prefetched_to), horizon, shards))
                prefetched_to = horizon
                self._producer.discard(lambda k: k[0] >= position)
            item = self.item_at(position)
            self._consumed += 1
            if item is not None:
                filtered_in_a_row = 0
                yield item
            elif (filtered_in_a_row := filtered_in_a_row + 1) >= MAX_CONSECUTIVE_FILTERED:
                raise ValueError(
                    f"{filtered_in_a_row} prompts in a row were skipped: too long for max_prompt_length="
                    f"{self.max_prompt_length} or failed to generate (so far: {dict(self.stats)}): raise "
                    "data.max_prompt_length or make the mix's tasks smaller, or fix the task that fails"
                )

    def start(self) -> None:
        """Starts the producer processes now and waits until they are ready, instead of at the first slow item."""
        if self._routed:
            self._ensure_producer().wait_ready()

    def take(self, n: int) -> list[dict[str, Any]]:
        """Returns the next `n` items (advancing the stream)."""
        return list(itertools.islice(iter(self), n))

    # ----- state (torchdata's StatefulDataLoader calls these, in each worker; verl saves it as data.pt)
    def state_dict(self) -> dict[str, Any]:
        return {"version": _STATE_VERSION, "mix": self.mix_fingerprint, "mix_source": self.mix.source,
                "mix_tasks": self.mix.keys, "split": self.split, "seed": self.seed, "consumed": self._consumed,
                "curriculum": self.curriculum.state_dict(), "sampler": self.sampler.state_dict(),
                "stats": dict(self.stats)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restores position, curriculum and sampler; refuses state saved for another mix, split or seed.

        A position means nothing under another mix (other tasks are drawn there), so continuing silently would train
        on a stream that neither run asked for."""
        version = state.get("version")
        if version != _STATE_VERSION:
            raise ValueError(
                f"stream state version {version} != {_STATE_VERSION}: this checkpoint's data.pt was saved by an "
                "older rg-grpo whose state does not name its mix, so it cannot be checked against env.mix; "
                f"{FRESH_START_HINT}"
            )
        differences = []
        if state.get("mix") != self.mix_fingerprint:
            differences.append(
                f"env.mix: saved {state.get('mix_source')} (tasks {state.get('mix_tasks')}, fingerprint "
                f"{str(state.get('mix'))[:12]}), now {self.mix.source} (tasks {self.mix.keys}, fingerprint "
                f"{self.mix_fingerprint[:12]})"
                + (": weights, configs, levels, curriculum or sampler settings changed"
                   if state.get("mix_tasks") == self.mix.keys else ""))
        if state.get("seed") != self.seed:
            differences.append(f"env.seed: saved {state.get('seed')}, now {self.seed}")
        if state.get("split") != self.split:
            differences.append(f"split: saved {state.get('split')}, now {self.split}")
        if differences:
            raise ValueError("stream state (data.pt) was saved for another stream; "
                             + "; ".join(differences)
                             + f". Resume with the saved values, or {FRESH_START_HINT}")
        self._consumed = int(state["consumed"])
        self.curriculum.load_state_dict(state["curriculum"])
        self.sampler.load_state_dict(state.get("sampler", {}))
        self.stats = Counter(state.get("stats", {}))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_producer"] = None  # processes and threads stay with their owner; a copy starts its own
        return state

    def close(self) -> None:
        """Stops producer processes (they also exit on their own when this process ends)."""
        if self._producer is not None:
            self._producer.close()
            self._producer = None


def build_validation_set(mix: Mix | str | dict, size: int, seed: int = 0, **stream_kwargs: Any) -> list[dict]:
    """Returns a fixed list of `size` items from the validation split (never overlapping training seeds).

    Tasks are taken at their start levels; the same arguments always give the same list.
    """
    stream = TaskStream(mix, split="validation", seed=seed, **stream_kwargs)
    try:
        return stream.take(size)
    finally:
        stream.close()
