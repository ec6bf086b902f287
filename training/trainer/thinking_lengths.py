"""A speed-measurement agent loop: each response runs to a length drawn from a thinking model's long tail.

The GPU kit's async stages (gpu_kit/gpu_path.py, g5) compare verl's sync and colocated async trainers at the
Qwen3-1.7B shape with random weights, whose responses never stop by themselves (a random model almost never samples
EOS): with `ignore_eos` every response would run to the limit, and a sync step would lose nothing to its longest. So
each request gets its own `max_tokens`, drawn from its place in the stream (the prompt's index, the sample's number in
its group), the same in both arms: 15% run to the limit, the rest log-uniform from a sixteenth of it up (256 of
4,096 tokens; median ~1,340, mean ~1,800), the shape of a thinking model's lengths on Reasoning Gym (hundreds to
thousands of tokens). verl's vLLM server and the CPU backend's both honour a request's `max_tokens`, and verl's
partial rollout continues an aborted request with what is left of it. It measures speed, nothing else.

Registered in training/trainer/agent_loops.yaml as `rg_thinking_lengths`; chosen with
`actor_rollout_ref.rollout.agent.default_agent_loop=rg_thinking_lengths actor_rollout_ref.rollout.ignore_eos=true`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from training.trainer.seeding import SeededSingleTurnAgentLoop, _scalar

AGENT_LOOP_NAME = "rg_thinking_lengths"
AT_LIMIT = 0.15  # the share of responses cut at the limit
SHORTEST = 1 / 16  # the shortest drawn response, a share of the limit (256 of 4,096 tokens)


def drawn_length(index: int, session: int, limit: int) -> int:
    """The response length of sample `session` of the prompt at stream `index`, at most `limit` tokens."""
    digest = hashlib.blake2b(f"{int(index)}/{int(session)}".encode(), digest_size=8).digest()
    unit = int.from_bytes(digest, "little") / 2**64
    shortest = max(1.0, SHORTEST * limit)
    if unit >= 1 - AT_LIMIT:
        return limit
    return max(1, int(shortest * (limit / shortest) ** (unit / (1 - AT_LIMIT))))


class ThinkingLengthAgentLoop(SeededSingleTurnAgentLoop):
    """Our single-turn agent loop with each request's `max_tokens` set by `drawn_length`."""

    async def run(self, sampling_params: dict[str, Any], **kwargs):
        length = drawn_length(_scalar(kwargs.get("index", 0)), _scalar(kwargs.get("session_id", 0)),
                              int(self.response_length))
        return await super().run({**sampling_params, "max_tokens": length}, **kwargs)
