"""Reproducible sampling: every rollout request carries its own seed, drawn from the run's seed and its place in the run.

Why per request: a rollout server that draws from one generator gives a response the random numbers left by whichever
requests shared its batch, and which requests share a batch is decided by arrival timing; two runs of one seed were
two different draws. The seed here is a function of (env.seed, training step, the prompt's stream index, the sample's
number in its group), so a response's draws are the same in every run of the seed, resumed runs included.

- `SeededSingleTurnAgentLoop`: verl's single-turn agent loop, adding `seed` to each sampled request's sampling
  parameters (a vLLM `SamplingParams` field, honoured per request by vLLM and by the CPU backend's transformers
  server) where `seeds_requests` says so. It also marks each response cut at the response limit
  (`response_truncated` in its extra fields, which verl's naive reward manager merges into the reward's extra_info:
  envs.reward's `truncated` option reads it). Named in verl's agent-loop registry file agent_loops.yaml
  (training/launch/config.py points verl to it).
- `OrderedSubmissions`: wraps the agent-loop manager the trainer submits prompts to: it numbers the prompts in
  submission order (for `ordered_keys`, which sorts a sampled batch into that order instead of arrival order) and tells
  a CPU backend's transformers server how many requests each submission will send, so that it samples them as one
  batch sorted by prompt and seed (training/cpu_backend/rollout.py) rather than as timing gathered them.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

SEED_BITS = 63  # vLLM and torch generators take any non-negative int64
# training.cpu_backend.ROLLOUT_NAME, not imported: importing the CPU backend registers it, in GPU runs' workers too
CPU_ROLLOUT_NAME = "transformers"


def request_seed(run_seed: int, global_steps: int, index: int, session: int) -> int:
    """Returns the sampling seed of one response: sample `session` of the prompt at stream `index`, at a step."""
    text = f"{int(run_seed)}/{int(global_steps)}/{int(index)}/{int(session)}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> (64 - SEED_BITS)


def run_seed(config) -> int:
    """The seed of a run's sampling: env.seed (the stream's), else verl's rollout.seed."""
    env_seed = config.get("env", {}).get("seed") if hasattr(config, "get") else None
    return int(env_seed if env_seed is not None else config.actor_rollout_ref.rollout.get("seed", 0) or 0)


def seeds_requests(rollout_config) -> bool:
    """Whether sampled requests get seeds: on the CPU backend's transformers rollout (which then repeats a run to the
    bit), and wherever `rollout.full_determinism` asks for it (verl alone would give every request of a replica the
    same seed there, and a GRPO group's samples would be alike). Not by default on vLLM: it draws for seeded requests
    one request at a time, and its batches, gathered as requests arrive, would not repeat anyway."""
    return str(rollout_config.get("name")) == CPU_ROLLOUT_NAME or bool(rollout_config.get("full_determinism", False))


class SeededSingleTurnAgentLoop(SingleTurnAgentLoop):
    """verl's single-turn agent loop whose sampled requests carry `request_seed(...)` where `seeds_requests` (greedy
    ones need none)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs):
        if (seeds_requests(self.rollout_config) and float(sampling_params.get("temperature", 1.0)) > 0
                and sampling_params.get("seed") is None):
            seed = request_seed(run_seed(self.config), _scalar(kwargs.get("global_steps", 0)),
                                _scalar(kwargs.get("index", 0)), _scalar(kwargs.get("session_id", 0)))
            sampling_params = {**sampling_params, "seed": seed}
        output = await super().run(sampling_params, **kwargs)
        # the response reached data.max_response_length (verl's response_length/clip_ratio counts the same)
        output.extra_fields["response_truncated"] = len(output.response_ids) >= self.response_length
        return output


def _scalar(value) -> int:
    """An int from what a verl batch field arrives as (int, numpy scalar, 0-d tensor, NonTensorData)."""
    value = getattr(value, "data", value)
    return int(value.item() if hasattr(value, "item") else value)


class OrderedSubmissions:
    """The agent-loop manager as the trainer sees it, with each submission numbered and announced (see module doc).

    `announce(count)` is called with the number of requests a submission sends before it is dispatched (the CPU
    backend's server waits for that many); every other attribute is the manager's.
    """

    def __init__(self, manager, announce: Callable[[int], None] | None, default_n: Callable[[bool], int]):
        self._manager, self._announce, self._default_n = manager, announce, default_n
        self.order: dict[str, tuple[int, int]] = {}  # uid -> (submission, position); read by ordered_keys
        self._submissions = 0

    def __getattr__(self, name):
        return getattr(self._manager, name)

    def generate_sequences(self, batch) -> None:
        uids = [str(uid) for uid in batch["uid"]]
        self._submissions += 1
        for position, uid in enumerate(uids):
            self.order[uid] = (self._submissions, position)
        if self._announce is not None:
            validate = batch["validate"] if "validate" in batch.keys() else False
            validate = bool(getattr(validate, "data", validate))  # NonTensorData in verl's batches
            ns = batch.get("__rollout_n__") if "__rollout_n__" in batch.keys() else None
            count = sum(int(n) for n in ns) if ns is not None else len(uids) * self._default_n(validate)
            self._announce(count)
        return self._manager.generate_sequences(batch)


def ordered_keys(keys: list[str], tags: list[dict], order: dict[str, tuple[int, int]]) -> tuple[list[str], list[dict]]:
    """Sorts trajectory keys (`{uid}_{session}_{output}`) into submission order, then session and output number.

    verl lists a sampled batch in the order its trajectories reached TransferQueue (timing); training on it in that
    order makes the loss's sums, and so the run, differ from one run to the next. Unknown uids go last.
    """
    def key(item):
        uid, _, rest = item[0].partition("_")
        session, _, output = rest.partition("_")
        known = order.get(uid)
        return (known is None, known or (0, 0), _int(session), _int(output))

    pairs = sorted(zip(keys, tags), key=key)
    return [k for k, _ in pairs], [t for _, t in pairs]


def _int(text: str) -> int:
    return int(text) if text.isdigit() else -1
