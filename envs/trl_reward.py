"""Our reward as a TRL reward function, for files written by envs.to_parquet (docs/task-stream.md).

TRL's GRPOTrainer calls a reward function with the prompts, the completions and every other dataset column as a
keyword argument (one value per completion), and awaits it when it is async. trl is not a dependency of this project.
"""

from __future__ import annotations

import asyncio

from envs.verl_reward import compute_score


def make_trl_reward(**reward_options):
    """Returns a TRL reward function scoring with these reward options (verl's reward_kwargs: partial_credit, ...)."""

    async def reasoning_gym_reward(prompts, completions, data_source, reward_model, extra_info, **kwargs):
        """One score per completion: envs.verl_reward.compute_score against the entry each row carries."""
        texts = [c[-1].get("content") if isinstance(c, list) else c for c in completions]  # chat or plain text
        results = await asyncio.gather(*[
            compute_score(data_source=source, solution_str=text, ground_truth=reward["ground_truth"],
                          extra_info=info, **reward_options)
            for source, text, reward, info in zip(data_source, texts, reward_model, extra_info)])
        return [result["score"] for result in results]

    return reasoning_gym_reward  # TRL names the reward's metrics after the function's __name__


reasoning_gym_reward = make_trl_reward()  # the default options: tags only, binarised
