"""Test rewards: our real reward plus a signal an untrained tiny model cannot earn, so that its groups differ.

Loaded by file path (`reward.custom_reward_function.path=tests/noisy_reward.py`, `.name=<function>`); deterministic
across processes (a CRC of the response text, never Python's salted hash).
- `compute_score`: a 0/1 bonus on the score, so that dynamic sampling on the reward has groups to keep;
- `lucky`: half of the responses count as right answers (acc 1, score + 1), so that groups differ in accuracy too
  (DAPO's dynamic sampling keeps groups by accuracy);
- `always_right`: every response counts as right, so that a curriculum sees a mean accuracy of 1 and promotes.
Each wraps the real reward, so a config's own reward options (format reward, fallbacks) still apply.
"""

import zlib

from envs.verl_reward import compute_score as real_compute_score


def _bit(text: str) -> int:
    return zlib.crc32(text.encode()) % 2


async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    result = await real_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    result["score"] = float(result["score"]) + float(_bit(solution_str))
    return result


async def _right(result: dict) -> dict:
    if result["acc"] < 1.0:
        result.update(acc=1.0, score=float(result["score"]) + 1.0)
    return result


async def lucky(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    result = await real_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
    return await _right(result) if _bit(solution_str) else result


async def always_right(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return await _right(await real_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs))
