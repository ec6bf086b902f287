"""A test reward: our real reward plus a 0/1 bonus drawn from the response text, so that an untrained tiny model's
groups differ and dynamic sampling (which drops groups whose scores are all equal) has groups to keep.

Loaded by file path (`reward.custom_reward_function.path=tests/noisy_reward.py`); deterministic across processes.
"""

import zlib

from envs.verl_reward import compute_score as real_compute_score


async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    result = await real_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    result["score"] = float(result["score"]) + float(zlib.crc32(solution_str.encode()) % 2)
    return result
