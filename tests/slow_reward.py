"""A test reward: our real reward, but while the file named by $RG_GRPO_TEST_REWARD_DELAY_FILE holds a number of
seconds, each response waits that long and responses are scored one at a time. A test writes the file to make
a step of a real run slow but moving (a response finishes every few seconds): the watchdog must not call it hung.

Loaded by file path (`reward.custom_reward_function.path=tests/slow_reward.py`).
"""

import asyncio
import os

from envs.verl_reward import compute_score as real_compute_score

DELAY_FILE = "RG_GRPO_TEST_REWARD_DELAY_FILE"
_one_at_a_time: asyncio.Lock | None = None


def _delay() -> float:
    try:
        with open(os.environ[DELAY_FILE]) as delay:
            return float(delay.read())
    except (KeyError, OSError, ValueError):
        return 0.0


async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    global _one_at_a_time
    if _delay() > 0:
        _one_at_a_time = _one_at_a_time or asyncio.Lock()
        async with _one_at_a_time:
            await asyncio.sleep(_delay())
    return await real_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
