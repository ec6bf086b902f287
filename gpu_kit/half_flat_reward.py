"""A speed-stage reward: half of the groups score alike (advantage 0), the other half differ.

The skip stages (gpu_kit/gpu_path.py, g4) train a random-weight model, whose every response scores 0 under the real
reward: every group would be flat and the update would skip everything. This reward gives a group's responses a
0/1 each by a CRC of the response text when a CRC of the group's expected answer is odd, else 0 for all; so about
half the groups are flat, as on a real mix (BENCHMARKS.md: 38-81% of a CPU quickstart step's groups). It measures
speed, nothing else. Loaded by file path (`reward.custom_reward_function.path=gpu_kit/half_flat_reward.py`).
"""

import zlib


async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    varied = zlib.crc32(str(ground_truth).encode()) % 2
    score = float(zlib.crc32(solution_str.encode()) % 2) if varied else 0.0
    return {"score": score, "acc": score}
