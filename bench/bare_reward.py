"""The unguarded reward users usually write: extract the answer, call score_answer on the carried entry (benchmark only)."""

import json
from functools import lru_cache

import reasoning_gym
from reasoning_gym.utils import extract_answer


@lru_cache(maxsize=None)
def _dataset(task: str, config_text: str):
    return reasoning_gym.create_dataset(task, seed=0, size=1, **json.loads(config_text))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    entry = extra_info["entry"]
    return _dataset(extra_info["task_name"], extra_info["config_text"]).score_answer(extract_answer(solution_str), entry)
