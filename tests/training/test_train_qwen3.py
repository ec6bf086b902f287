"""A thinking model trains for real, offline: the tiny random Qwen3 (utils.offline_models.tiny_qwen3_path), whose
template opens <think> in the prompt, takes a GRPO step through `python training/train_grpo.py` on the CPU backend,
and the step's reward, format and truncation metrics are checked against the responses verl dumped."""

import json
from pathlib import Path

import pytest

from tests.training.test_train import PROMPTS, SAMPLES, run_logs, step_metrics, train

THINKING = ["model=tiny-qwen3", "env.reward.require_think=true", "env.reward.answer_forms=[answer,boxed]",
            "env.reward.truncated=zero", "env.reward.format_reward=0.25", "trainer.save_freq=-1",
            "env.console=quiet"]  # quiet: our step line, with its note on cut responses


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_thinking_model_takes_a_grpo_step_and_its_metrics_match_its_responses(tmp_path, tiny_run):
    run = [("model=tiny-qwen3" if arg == "model=tiny" else arg) for arg in tiny_run]
    output = train(run, tmp_path, "cpu", 1, *THINKING)
    metrics = step_metrics(run_logs(tmp_path), 1)
    # envs' reward fields, dumped by the trainer (training/trainer/generations.py): every group of the step
    rows = [json.loads(line) for line in (tmp_path / "ckpt" / "generations" / "train" / "1.jsonl").read_text().splitlines()]
    assert len(rows) == PROMPTS * SAMPLES and metrics["env/samples"] == PROMPTS * SAMPLES
    # the rendered prompt opened the think block, and the reward knew it: a response that never wrote </think> has
    # no answer ("never closed"), whatever numbers it holds
    assert all(row["prompt"].endswith("<think>\n") for row in rows)
    for row in rows:
        if "</think>" not in row["response"]:
            assert row["pred"] is None and "never closed" in row["reason"] and row["format_ok"] == 0.0
    # truncation: the trainer counts full-length responses, per task; the agent loop's mark reached the reward, which
    # scored exactly those 0 (env.reward.truncated=zero) and said why
    assert all(row["truncated"] == float(row["response_length"] == 24) for row in rows)
    assert all(("cut at max_response_length" in row["reason"]) == bool(row["truncated"]) for row in rows)
    assert all(row["score"] == 0.0 for row in rows if row["truncated"])
    assert metrics["env/truncated"] == pytest.approx(sum(row["truncated"] for row in rows) / len(rows))
    for task in {row["task"] for row in rows}:
        mine = [row["truncated"] for row in rows if row["task"] == task]
        assert metrics[f"env/truncated/{task}"] == pytest.approx(sum(mine) / len(mine))
    assert metrics["env/truncated"] == pytest.approx(metrics["response_length/clip_ratio"])  # verl's own count
    assert metrics["env/truncated"] > 0  # 24 tokens from a random model: it rarely stops
    assert f"cut at max_response_length {metrics['env/truncated']:.0%}" in output
    # reward and format, as the reward gave them
    assert metrics["env/reward"] == pytest.approx(sum(row["score"] for row in rows) / len(rows))
    assert metrics["env/format_rate"] == pytest.approx(sum(row["format_ok"] for row in rows) / len(rows))
    assert metrics["actor/grad_norm"] >= 0
