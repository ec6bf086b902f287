"""A test reward: our real reward, but once the file named by $RG_GRPO_TEST_REWARD_DELAY_FILE holds "STEP SECONDS",
each response of step STEP and later waits SECONDS and responses are scored one at a time. A test writes the file to
make a step of a real run slow but moving (a response finishes every few seconds): the watchdog must not call it hung.
The step a response belongs to is the last one logged in $RG_GRPO_TEST_PROGRESS_FILE (the run's progress.jsonl,
written at each step's end before the next begins) plus one, so the slow step is slow from its start: a delay that
began in the middle of a step made that step the slowest and the next one's bound too long to exceed.

Loaded by file path (`reward.custom_reward_function.path=tests/slow_reward.py`).
"""

import asyncio
import json
import os

from envs.verl_reward import compute_score as real_compute_score

DELAY_FILE = "RG_GRPO_TEST_REWARD_DELAY_FILE"
PROGRESS_FILE = "RG_GRPO_TEST_PROGRESS_FILE"
_one_at_a_time: asyncio.Lock | None = None


def _logged_steps() -> int:
    try:
        with open(os.environ[PROGRESS_FILE]) as progress:
            return max([json.loads(line)["step"] for line in progress if '"kind": "step"' in line], default=0)
    except (KeyError, OSError, ValueError):
        return 0


def _delay() -> float:
    try:
        with open(os.environ[DELAY_FILE]) as delay:
            from_step, seconds = delay.read().split()
    except (KeyError, OSError, ValueError):
        return 0.0
    return float(seconds) if _logged_steps() + 1 >= int(from_step) else 0.0


async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    global _one_at_a_time
    delay = _delay()
    if delay > 0:
        _one_at_a_time = _one_at_a_time or asyncio.Lock()
        async with _one_at_a_time:
            await asyncio.sleep(delay)
    return await real_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
