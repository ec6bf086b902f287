"""verl's custom reward function: `reward.custom_reward_function.path=<this file>`, `name=compute_score`.

verl calls it once per response, concurrently, in its reward-loop worker processes. It is `async` so that the calls of
one batch queue up together in the isolated scorer (envs.isolation) and cross the process boundary as one batch.
Reward options arrive as keyword arguments (`reward.custom_reward_function.reward_kwargs`); see envs.reward.RewardOptions.

verl imports this module when a reward worker starts, well before the first step: importing it starts the isolated
scorer's child processes in the background, so that step 1 (and the first step after a resume) does not wait for them.
"""

from __future__ import annotations

import time
from functools import lru_cache
from collections.abc import Sequence
from typing import Any, Callable

from envs.isolation import score_async, warm_up
from envs.reward import RewardOptions, score_response, score_truncated

# Keyword arguments verl itself may add; they are not reward options.
_VERL_KWARGS = {"reward_router_address", "reward_model_tokenizer"}

warm_up()


def _hashable(value: Any) -> Any:
    """A list option (answer_forms: [answer, boxed]; an OmegaConf ListConfig from verl) as a tuple, for the cache."""
    return tuple(value) if isinstance(value, Sequence) and not isinstance(value, str) else value


@lru_cache(maxsize=64)
def _options(items: tuple[tuple[str, Any], ...]) -> RewardOptions:
    return RewardOptions.from_kwargs(dict(items))


@lru_cache(maxsize=4)
def _token_counter(path: str) -> Callable[[str], int]:
    """Loads the tokenizer once per path; a fast tokenizer's own encode skips the transformers wrapper."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.is_fast:
        backend = tokenizer.backend_tokenizer
        return lambda text: len(backend.encode(text, add_special_tokens=False).ids)
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def count_tokens(tokenizer_path: str, text: Any) -> int:
    """Tokens of a response (about 1 µs a token with a cached fast tokenizer); 0 for a non-string."""
    if not isinstance(text, str):
        return 0
    try:
        return _token_counter(tokenizer_path)(text)
    except TypeError:  # lone surrogates cannot be tokenised: count each as a replacement character
        return _token_counter(tokenizer_path)(text.encode("utf-8", "replace").decode("utf-8"))


def with_decoded_entry(extra_info: dict | None) -> dict | None:
    """Returns `extra_info` with its `entry`: an item read from a file written by envs.to_parquet carries the entry as
    JSON text (`entry_json`, see envs.entry_json); a stream item carries it as is and is returned unchanged."""
    if extra_info and "entry" not in extra_info and isinstance(extra_info.get("entry_json"), str):
        from envs.entry_json import decode_entry

        return {**extra_info, "entry": decode_entry(extra_info["entry_json"])}
    return extra_info


async def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                        **reward_kwargs: Any) -> dict[str, Any]:
    """Returns envs.reward.score_response's dict for one response, scored against the entry in `extra_info`.

    With `tokenizer_path` the length is `response_length` in tokens (re-tokenised text: verl passes no token count);
    without, it is `response_chars`. `score_seconds` is this call's own wall time (what our reward costs a step,
    without verl's reward-loop hops around it). From `extra_info`: `prompt_opens_think` (set by the stream: the
    rendered prompt opened the think block) and `response_truncated` (set by the agent loop, merged in by verl's naive
    manager: the response reached the limit; `truncated` in the result, -1.0 when not known).
    """
    start = time.perf_counter()
    extra_info = with_decoded_entry(extra_info)
    if not extra_info or "entry" not in extra_info:
        raise ValueError(
            f"compute_score: extra_info of a '{data_source}' item has no 'entry'; this reward needs items from "
            "envs.stream.TaskStream (it scores the carried Reasoning Gym entry, it never regenerates one)"
        )
    options = _options(tuple(sorted((k, _hashable(v)) for k, v in reward_kwargs.items() if k not in _VERL_KWARGS)))
    if options.overlong_buffer and not options.tokenizer_path:
        raise ValueError("compute_score: overlong_buffer counts tokens, so it needs the tokenizer_path reward option")
    length = count_tokens(options.tokenizer_path, solution_str) if options.tokenizer_path else None
    request = {"response": solution_str, "entry": extra_info["entry"], "task": extra_info.get("task_name"),
               "options": options, "config": extra_info.get("config_text", extra_info.get("config")),
               "response_length": length, "prompt_opens_think": bool(extra_info.get("prompt_opens_think", False))}
    result = await score_async(**request) if options.isolate else score_response(**request)
    result = score_truncated(result, extra_info.get("response_truncated"), options)
    result["task"] = extra_info.get("task", result["task"])  # the mix key, so metrics follow the mix's names
    result["score_seconds"] = time.perf_counter() - start
    return result
