"""The algorithm of every shipped config, DAPO and Dr. GRPO above all: verl's own functions, given the settings the
way verl's workers read them from the composed config, compute what the papers' formulas give by hand
(tests/training/grpo_by_hand.py) on small batches built so that each setting changes the number: clip-higher, the
loss aggregation mode, the advantage's std normalisation, DAPO's overlong penalty inside its buffer, and the
curriculum's thresholds. docs/training.md's table of the presets' keys is checked against the configs too.
"""

import asyncio
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from envs.mix import mix_path
from tests.training.grpo_by_hand import group_advantages, overlong_reward, policy_loss
from tests.training.shipped import CONFIGS, composed, mix_of
from training.launch.config import compose_config, resolve_config

REPO = Path(__file__).resolve().parents[2]
# a small batch: two prompts x three responses of different lengths, ratios pi/pi_old on both sides of every clip
GROUPS = ["a", "a", "a", "b", "b", "b"]
SCORES = [1.0, 0.0, 0.0, 1.2, 0.2, 1.0]
RATIOS = [[0.5, 1.1, 1.25], [0.7, 1.0, 1.5, 0.9, 1.3], [1.35], [0.6, 1.22, 1.4, 1.0], [1.29, 0.75], [0.85, 1.6, 1.1]]


def actor_config(cfg):
    """The actor's settings as verl's worker builds them (verl.workers.config.ActorConfig from the composed config),
    with the global batch info verl's ppo_loss adds before calling the policy loss (one rank, this micro-batch)."""
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    actor.global_batch_info.update(dp_size=1, batch_num_tokens=None, global_batch_size=None,
                                   loss_scale_factor=actor.loss_scale_factor)
    return actor


def verl_policy_loss(actor, advantages: list[float], ratios: list[list[float]]) -> float:
    """verl's registered policy loss on a padded batch: each response's advantage on its tokens, log pi - log pi_old
    = log(ratio)."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    width = max(map(len, ratios))
    mask = torch.tensor([[1.0] * len(r) + [0.0] * (width - len(r)) for r in ratios])
    log_ratio = torch.tensor([[np.log(x) for x in r] + [0.0] * (width - len(r)) for r in ratios], dtype=torch.float64)
    old = torch.zeros_like(log_ratio)
    adv = torch.tensor(advantages, dtype=torch.float64)[:, None] * mask
    loss, _ = get_policy_loss_fn(actor.policy_loss.loss_mode)(
        old_log_prob=old, log_prob=log_ratio, advantages=adv, response_mask=mask.bool(),
        loss_agg_mode=actor.loss_agg_mode, config=actor)
    return float(loss)


def verl_advantages(cfg, groups: list[str], scores: list[float]) -> list[float]:
    """verl's advantage of each response, computed as its trainer does (compute_advantage with the algorithm keys)."""
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards = torch.zeros(len(scores), 4)
    rewards[:, -1] = torch.tensor(scores)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": torch.ones(len(scores), 4)},
                               non_tensors={"uid": np.array(groups, dtype=object)})
    algorithm = cfg.algorithm
    data = compute_advantage(data, adv_estimator=algorithm.adv_estimator, gamma=algorithm.gamma, lam=algorithm.lam,
                             norm_adv_by_std_in_grpo=algorithm.get("norm_adv_by_std_in_grpo", True), config=algorithm)
    return data.batch["advantages"][:, 0].tolist()


@pytest.mark.parametrize("name", CONFIGS)
def test_advantages_and_loss_are_the_papers(name):
    cfg = composed(name)
    algorithm, actor = cfg.algorithm, actor_config(cfg)
    assert algorithm.adv_estimator == "grpo" and actor.policy_loss.loss_mode == "vanilla"
    norm = bool(algorithm.norm_adv_by_std_in_grpo)
    advantages = verl_advantages(cfg, GROUPS, SCORES)
    assert advantages == pytest.approx(group_advantages(GROUPS, SCORES, norm), abs=1e-6)
    # the other choice gives other advantages on this batch, so the check above sees the setting
    assert advantages != pytest.approx(group_advantages(GROUPS, SCORES, not norm), abs=1e-3)
    clip = (actor.clip_ratio_low, actor.clip_ratio_high)
    expected = policy_loss(advantages, RATIOS, actor.loss_agg_mode, *clip, actor.loss_scale_factor, actor.clip_ratio_c)
    assert verl_policy_loss(actor, advantages, RATIOS) == pytest.approx(expected, rel=1e-9)
    # ... and another aggregation, or the symmetric clip, would give another loss
    other_mode = "seq-mean-token-mean" if actor.loss_agg_mode != "seq-mean-token-mean" else "token-mean"
    assert expected != pytest.approx(policy_loss(advantages, RATIOS, other_mode, *clip, actor.loss_scale_factor or 1))
    if clip[0] != clip[1]:
        assert expected != pytest.approx(policy_loss(advantages, RATIOS, actor.loss_agg_mode, clip[0], clip[0],
                                                     actor.loss_scale_factor, actor.clip_ratio_c))


def test_presets_set_what_their_papers_name():
    dapo, dr_grpo = composed("dapo"), composed("dr_grpo")
    actor = dapo.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert dapo.algorithm.filter_groups.enable and dapo.algorithm.filter_groups.metric == "acc"
    assert dapo.reward.reward_manager.name == "dapo" and dapo.reward.reward_kwargs.overlong_buffer_cfg.enable
    assert dapo.reward.reward_kwargs.max_resp_len == dapo.data.max_response_length
    assert not dr_grpo.algorithm.norm_adv_by_std_in_grpo
    assert dr_grpo.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-sum-norm"
    assert dr_grpo.actor_rollout_ref.actor.loss_scale_factor == dr_grpo.data.max_response_length
    for cfg in (dapo, dr_grpo):
        assert not cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.actor.entropy_coeff == 0
        assert not cfg.algorithm.use_kl_in_reward


def documented_preset_keys() -> list[tuple[str, str, str]]:
    """(preset, key, value) of every `key=value` in docs/training.md's table of the DAPO and Dr. GRPO presets."""
    page = REPO / "docs" / "training.md"
    rows = [line for line in page.read_text().splitlines() if re.match(r"\| `(dapo|dr_grpo)` \|", line)]
    return [(row.split("`")[1], key, value) for row in rows for key, value in re.findall(r"`([\w.]+)=([^`]+)`", row)]


def test_the_documented_table_of_the_presets_is_what_they_set():
    found = documented_preset_keys()
    assert {preset for preset, _, _ in found} == {"dapo", "dr_grpo"} and len(found) >= 10
    for preset, key, value in found:
        actual = OmegaConf.select(composed(preset), key)
        assert str(actual).lower() == value.lower(), \
            f"docs/training.md says {preset}: {key}={value}, the config has {actual}"


def dapo_reward_manager(cfg, tokenizer):
    """verl's reward manager as its reward workers build it from `cfg` (the dapo one for the DAPO preset)."""
    from verl.trainer.ppo.reward import load_reward_manager

    return load_reward_manager(cfg, tokenizer)


def score_lengths(manager, tokenizer, item: dict, lengths: list[int]) -> list[float]:
    """The reward of responses of exactly these lengths (tokens), scored by `manager` as verl's reward loop does."""
    from verl import DataProto

    token = tokenizer.convert_tokens_to_ids("a")

    async def one(length: int) -> float:
        data = DataProto.from_dict(
            tensors={"responses": torch.full((1, max(lengths)), token),
                     "attention_mask": torch.tensor([[1] * 4 + [1] * length + [0] * (max(lengths) - length)])},
            non_tensors={key: np.array([item[key]], dtype=object)
                         for key in ("data_source", "reward_model", "extra_info")})
        return float((await manager.run_single(data))["reward_score"])

    async def every():
        return await asyncio.gather(*(one(n) for n in lengths))

    return manager.loop.run_until_complete(every())  # the loop the manager was built in, as in verl's reward worker


@pytest.mark.parametrize("name", [n for n in CONFIGS if composed(n).reward.reward_manager.name == "dapo"])
def test_a_response_inside_the_overlong_buffer_is_penalised_as_configured(name, tiny_model_dir, tiny_tokenizer):
    from envs.stream import TaskStream

    cfg = resolve_config(compose_config(name, ["model=tiny"]), gpu_count=1)
    shaping = cfg.reward.reward_kwargs
    top, buffer, factor = int(shaping.max_resp_len), int(shaping.overlong_buffer_cfg.len), \
        float(shaping.overlong_buffer_cfg.penalty_factor)
    assert top == cfg.data.max_response_length and 0 < buffer < top
    item = TaskStream(str(mix_path("easy"))).take(1)[0]
    lengths = [top - buffer - 1, top - buffer, top - buffer + buffer // 4, top - buffer // 2, top]
    rewards = score_lengths(dapo_reward_manager(cfg, tiny_tokenizer), tiny_tokenizer, item, lengths)
    # a wrong answer without tags scores 0 before shaping, so the reward is the penalty alone
    assert rewards == pytest.approx([overlong_reward(n, top, buffer, factor) for n in lengths])
    assert rewards[0] == rewards[1] == 0 and -factor < rewards[2] < rewards[1] and rewards[-1] == -factor


@pytest.mark.parametrize("name", [n for n in CONFIGS if mix_of(n).curriculum.enabled])
def test_curriculum_moves_when_the_shipped_threshold_is_crossed(name):
    from envs.curriculum import Curriculum

    mix = mix_of(name)
    rule = mix.curriculum
    right = math.ceil(rule.promote_at * rule.min_samples)  # the fewest right answers whose share reaches it
    for key, start in Curriculum(mix).levels().items():
        at, below = Curriculum(mix), Curriculum(mix)
        scores = [1.0] * right + [0.0] * (rule.min_samples - right)
        assert at.update({key: scores}) == {key: start + 1}
        assert below.update({key: [1.0] * (right - 1) + [0.0] * (rule.min_samples - right + 1)}) == {}
        assert below.levels()[key] == start


@pytest.mark.parametrize("name", CONFIGS)
def test_reward_options_score_a_right_and_a_wrong_answer_as_configured(name):
    """The config's env.reward, as the reward function receives it, on a right answer in tags and a wrong one."""
    from envs.reward import RewardOptions, score_response
    from envs.stream import TaskStream

    options = dict(composed(name).reward.custom_reward_function.reward_kwargs)
    options.update(tokenizer_path="", isolate=False)  # no token counting, scored in this process
    options = RewardOptions.from_kwargs(options)
    [item] = TaskStream(str(mix_path("easy"))).take(1)
    entry, task = item["extra_info"]["entry"], item["extra_info"]["task"]
    right = score_response(f"<think>sure</think>\n<answer>{entry['answer']}</answer>", entry, task, options)
    wrong = score_response("<think>no idea</think>\n<answer>-12345</answer>", entry, task, options)
    assert right["acc"] == 1.0 and right["score"] == pytest.approx(1.0 + options.format_reward)
    assert wrong["acc"] == 0.0 and wrong["score"] == pytest.approx(options.format_reward)
