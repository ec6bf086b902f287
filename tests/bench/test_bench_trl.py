"""bench/bench_trl.py: the composed config's mapping to TRL's GRPOConfig (no training; TRL only when installed)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_trl", REPO / "bench" / "bench_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load_bench()


@pytest.fixture(scope="module")
def tiny_cfg(bench):
    return bench.compose(bench.bench_overrides(bench.parse_args(["--model", "tiny", "--steps", "3"])))


def test_trl_settings_follow_the_composed_config(bench, tiny_cfg):
    from omegaconf import OmegaConf

    from training.launch.hardware import cpu_threads

    cfg, settings = tiny_cfg, bench.trl_settings(tiny_cfg)
    arr, c = cfg.actor_rollout_ref, settings["config"]
    assert c["num_generations"] == arr.rollout.n
    # one optimizer step per step: the whole generation batch (prompts x n) in micro-batches of the actor's size
    assert c["per_device_train_batch_size"] == arr.actor.ppo_micro_batch_size_per_gpu
    per_step = c["per_device_train_batch_size"] * c["gradient_accumulation_steps"]
    assert per_step == cfg.data.train_batch_size * arr.rollout.n
    assert settings["prompts"] == cfg.data.train_batch_size and c["max_steps"] == settings["steps"] == 3
    assert c["max_completion_length"] == cfg.data.max_response_length
    assert settings["max_prompt_length"] == cfg.data.max_prompt_length == bench.TINY_MAX_PROMPT_LENGTH
    assert (c["temperature"], c["top_p"]) == (arr.rollout.temperature, arr.rollout.top_p)
    assert c["learning_rate"] == arr.actor.optim.lr and c["max_grad_norm"] == arr.actor.grad_clip
    assert c["beta"] == (arr.actor.kl_loss_coef if arr.actor.use_kl_loss else 0.0)
    assert c["entropy_coef"] == arr.actor.entropy_coeff
    assert c["gradient_checkpointing"] == arr.model.enable_gradient_checkpointing
    assert not c["bf16"] and c["model_init_kwargs"]["dtype"] == "float32"
    assert settings["model_path"] == arr.model.path and Path(settings["model_path"]).is_dir()  # offline: resolved
    assert settings["threads"] == cpu_threads(1)
    assert settings["reward_options"] == OmegaConf.to_container(cfg.env.reward, resolve=True)
    assert settings["reward_options"]["tokenizer_path"] == settings["model_path"]


def test_fixed_length_runs_every_arm_to_the_response_limit(bench, tiny_cfg):
    args = bench.parse_args(["--model", "tiny", "--steps", "3", "--fixed-length"])
    overrides = bench.bench_overrides(args)
    cfg = bench.compose(overrides)
    assert cfg.actor_rollout_ref.rollout.ignore_eos  # ours and verl's vLLM server read it
    settings = bench.trl_settings(cfg)
    assert settings["config"]["generation_kwargs"] == {"min_new_tokens": cfg.data.max_response_length}
    assert "--fixed-length" in bench.worker_argv(args)  # the TRL worker composes the same config
    assert "generation_kwargs" not in bench.trl_settings(tiny_cfg)["config"]


def test_several_updates_per_step_are_refused(bench):
    args = bench.parse_args(["--model", "tiny", "--prompts", "4",
                             "--override", "actor_rollout_ref.actor.ppo_mini_batch_size=2"])
    # --prompts sets the mini-batch too; the later --override splits the step into two optimizer updates
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        bench.trl_settings(bench.compose(bench.bench_overrides(args)))


def test_rows_split_a_step(bench):
    row = bench.trl_row(2, 10.0, {"gen_and_score": 4.0, "generate": 3.0, "reward": 0.2, "ref": 1.0,
                                  "training_step": 9.0, "loss_forward": 2.0, "optimizer": 0.5}, {})
    assert row["generation"] == pytest.approx(3.0) and row["train"] == pytest.approx(5.5)
    assert row["other"] == pytest.approx(1.5) and row["phases"]["backward"] == pytest.approx(3.0)
    ours = bench.ours_row(2, {"timing_s/step": 10.0, "timing_s/gen": 2.0, "timing_s/update_actor": 5.0,
                              "timing_s/old_log_prob": 1.0})
    assert (ours["generation"], ours["train"], ours["other"]) == (2.0, 5.0, 3.0)
    assert bench.steady([ours, {**ours, "step": 1, "total": 99.0}], "total") == 10.0


@pytest.mark.skipif(not (REPO / ".venv-trl-site" / "trl").is_dir(), reason="TRL not installed (bench_trl.py --install)")
def test_grpo_config_accepts_the_mapping(bench, tiny_cfg, tmp_path):
    settings = bench.trl_settings(tiny_cfg)
    code = ("import json, sys; from trl import GRPOConfig; c = GRPOConfig(output_dir=sys.argv[2], "
            "**json.loads(open(sys.argv[1]).read())); print(c.generation_batch_size, c.steps_per_generation)")
    (tmp_path / "config.json").write_text(json.dumps(settings["config"]))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(bench.TRL_SITE), str(REPO)]), CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "config.json"), str(tmp_path / "out")],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    generation_batch, steps_per_generation = map(int, done.stdout.split()[-2:])
    assert generation_batch == settings["prompts"] * settings["config"]["num_generations"]
    assert steps_per_generation == settings["config"]["gradient_accumulation_steps"]


def test_the_report_puts_each_of_our_rollouts_beside_trl(bench, tiny_cfg):
    """Both of our arms (transformers and vLLM rollouts) against TRL in one table, with launch -> first rollout."""
    def ours(arm, seconds):
        return [bench.ours_row(s, {"timing_s/step": seconds, "timing_s/gen": 1.0, "timing_s/update_actor": 2.0}, arm)
                for s in (1, 2, 3)]

    trl = [bench.trl_row(s, 10.0, {"gen_and_score": 4.0, "generate": 3.0, "training_step": 9.0}, {}) for s in (1, 2, 3)]
    result = {"model": "tiny", "settings": bench.trl_settings(tiny_cfg), "load_before": 1.0, "load_after": 1.0,
              "transformers": {"steps": ours("transformers", 9.0), "wall_s": 60.0, "first_rollout_s": 40.0},
              "vllm": {"steps": ours("vllm", 6.0), "wall_s": 70.0, "first_rollout_s": 55.0},
              "trl": {"steps": trl, "wall_s": 50.0, "trl": "1.16.0"}}
    text = bench.report(result)
    assert "| step | 9.00 | 6.00 | 10.00 | 0.90x | 0.60x |" in text
    assert "Launch -> first rollout: transformers 40.0 s, vllm 55.0 s" in text
    assert "transformers:\n\n| phase" in text and "vllm:\n\n| phase" in text and "TRL:\n\n| phase" in text


def test_the_arms_run_in_the_order_given(bench, monkeypatch, tmp_path):
    """`--arms trl transformers` runs TRL first (the host drifts within a session: swapping the order shows how
    much); the order is recorded beside the results."""
    ran = []

    def ours(arm, overrides, workdir):
        ran.append(arm)
        return [], 1.0, 2.0

    def trl(args, settings, workdir):
        ran.append("trl")
        return [], 3.0, {"trl": "1.16.0"}

    monkeypatch.setattr(bench, "run_ours", ours)
    monkeypatch.setattr(bench, "run_trl", trl)
    monkeypatch.setattr(bench, "trl_installed", lambda: True)
    monkeypatch.setattr(bench, "report", lambda result: "")
    monkeypatch.setattr(sys, "argv", ["bench_trl.py", "--model", "tiny", "--steps", "3", "--out", str(tmp_path),
                                      "--arms", "trl", "transformers", "trl"])
    bench.main()
    result = json.loads((tmp_path / "results.json").read_text())
    assert ran == result["order"] == ["trl", "transformers"]
    assert result["trl"]["wall_s"] == 3.0 and result["transformers"]["first_rollout_s"] == 2.0
