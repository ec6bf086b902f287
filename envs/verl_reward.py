"""verl's custom reward function: `reward.custom_reward_function.path=<this file>`, `name=compute_score`.

verl calls it once per response, concurrently, in its reward-loop worker processes. It is `async` so that the calls of
one batch queue up together in the isolated scorer (envs.isolation) and cross the process boundary as one batch.
Reward options arrive as keyword arguments (`reward.custom_reward_function.reward_kwargs`); see envs.reward.RewardOptions.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from envs.isolation import score_async
from envs.reward import RewardOptions, score_response

# Keyword arguments verl itself may add; they are not reward options.
_VERL_KWARGS = {"reward_router_address", "reward_model_tokenizer"}


@lru_cache(maxsize=64)
def _options(items: tuple[tuple[str, Any], ...]) -> RewardOptions:
    return RewardOptions.from_kwargs(dict(items))


@lru_cache(maxsize=4)
def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                        **reward_kwargs: Any) -> dict[str, Any]:
    """Returns envs.reward.score_response's dict for one response, scored against the entry in `extra_info`."""
    if not extra_info or "entry" not in extra_info:
        raise ValueError(
            f"compute_score: extra_info of a '{data_source}' item has no 'entry'; this reward needs items from "
            "envs.stream.TaskStream (it scores the carried Reasoning Gym entry, it never regenerates one)"
        )
    options = _options(tuple(sorted((k, v) for k, v in reward_kwargs.items() if k not in _VERL_KWARGS)))
    length = None
    if options.overlong_buffer and options.tokenizer_path and isinstance(solution_str, str):
        length = len(_tokenizer(options.tokenizer_path).encode(solution_str, add_special_tokens=False))
    request = {"response": solution_str, "entry": extra_info["entry"], "task": extra_info.get("task_name"),
               "options": options, "config": extra_info.get("config_text", extra_info.get("config")), "response_length": length}
    result = await score_async(**request) if options.isolate else score_response(**request)
    result["task"] = extra_info.get("task", result["task"])  # the mix key, so metrics follow the mix's names
    return result
