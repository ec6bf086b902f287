"""The preflight end to end on the tiny model: config checks, stream, chat template, HF generation, verl-loaded reward."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from training.launch.config import compose_config, resolve_config
from training.launch.preflight import sample_group, score_all
from training.train_grpo import run
from training.trainer.metrics import SampleRecord, env_metrics, zero_variance_fraction

REPO = str(Path(__file__).resolve().parents[3])


@pytest.fixture
def small(tmp_path):
    return ["model=tiny", "data.max_prompt_length=512", "env.validation_size=4", "env.preflight.prompts=4",
            "env.preflight.samples=2", "env.preflight.max_new_tokens=16", "env.preflight.length_check_items=8",
            "env.on_cpu=null",
            # an empty checkpoint folder: a user's own run in checkpoints/ (another model) would be refused by the
            # resume check
            f"trainer.default_local_dir={tmp_path / 'ckpt'}"]


def test_shared_prefix_sampling_matches_plain_generate(tiny_model_dir, tiny_tokenizer):
    cfg = compose_config("quickstart", ["model=tiny"])
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    prompts = ["What is 2 + 3?", "Spell backward: reasoning, then give the answer in tags"]
    ours = sample_group(model, tiny_tokenizer, prompts, 3, 12, cfg, do_sample=False)
    tiny_tokenizer.padding_side = "left"
    enc = tiny_tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    plain = model.generate(input_ids=enc["input_ids"].repeat_interleave(3, 0), do_sample=False, max_new_tokens=12,
                           attention_mask=enc["attention_mask"].repeat_interleave(3, 0),
                           pad_token_id=tiny_tokenizer.pad_token_id)
    texts = [tiny_tokenizer.decode(row, skip_special_tokens=True) for row in plain[:, enc["input_ids"].shape[1]:]]
    assert [text for text, _ in ours] == texts
    assert all(0 < n <= 12 for _, n in ours)


def test_reward_is_loaded_as_verl_loads_it(tiny_model_dir, small):
    from envs.stream import TaskStream

    cfg = resolve_config(compose_config("quickstart", small + ["env.reward.format_reward=0.5"]), gpu_count=1)
    items = TaskStream(os.path.join(REPO, "configs/mix/easy.yaml")).take(2)
    right = f"<think>easy</think> <answer>{items[0]['reward_model']['ground_truth']}</answer>"
    results = score_all(cfg, items, [right, "no idea"])
    assert results[0]["score"] == 1.5 and results[0]["acc"] == 1.0
    assert results[1]["score"] == 0.0 and results[1]["answer_found"] == 0.0


def test_metrics_of_a_group():
    records = [SampleRecord("a", "g1", s, s, 1.0, 4.0) for s in (0.0, 1.0)] + \
              [SampleRecord("b", "g2", 0.0, 0.0, 0.0, 8.0) for _ in range(2)]
    metrics = env_metrics(records)
    assert metrics["env/a/accuracy"] == 0.5 and metrics["env/b/answer_rate"] == 0.0
    assert metrics["env/response_length"] == 6.0 and zero_variance_fraction(records) == 0.5
    assert metrics["env/zero_variance_groups"] == 0.5  # one of the two groups is flat: task b's
    assert metrics["env/a/zero_variance_groups"] == 0.0 and metrics["env/b/zero_variance_groups"] == 1.0
    assert env_metrics([])["env/zero_variance_groups"] == 0.0


def test_truncation_and_format_per_task():
    """A response of max_response_length tokens was cut: env/truncated/<task> and env/truncated, keys always present."""
    from training.trainer.metrics import record_from_reward

    records = [record_from_reward("a", "g1", {"acc": 0.0, "format_ok": 1.0}, 0.0, length, max_response_length=16)
               for length in (16, 15, 9, 16)] + [record_from_reward("b", "g2", {}, 0.0, 16.0) for _ in range(2)]
    metrics = env_metrics(records)
    assert metrics["env/truncated/a"] == 0.5 and metrics["env/truncated/b"] == 0.0  # b: limit unknown
    assert metrics["env/truncated"] == pytest.approx(2 / 6)
    assert metrics["env/a/format_rate"] == 1.0 and metrics["env/format_rate"] == pytest.approx(4 / 6)


def test_preflight_end_to_end_on_the_tiny_model(tiny_model_dir, small, capsys):
    code = run(compose_config("quickstart", small + ["preflight=true"]))
    out = capsys.readouterr().out
    assert code == 0, out
    for text in ("batch: 16 prompts x 8 samples", "validation set: 4 items", "zero-variance groups",
                 "answer", "all checks passed"):
        assert text in out
    assert out.count("\n--- ") == 3
    for task in ("chain_sum", "basic_arithmetic"):  # envs.audit on each task of the mix, 8 items each
        assert f"[preflight] scorer audit: {task}: Reasoning Gym's scorer; gold 1 on 8/8; prior" in out
    assert out.count("wrong answers: none scores as right; forms: float_zero 8/8") == 2
    assert "[check] update: leaves out sequences whose advantage is 0" in out  # no KL loss, no entropy bonus


def test_a_launch_with_the_kl_loss_says_in_one_line_why_its_update_runs_every_sequence(tiny_model_dir, small,
                                                                                       capsys):
    from training.train_grpo import prepare  # the launch's checks, which print the [check] lines

    prepare(compose_config("quickstart", small + ["actor_rollout_ref.actor.use_kl_loss=true"]), visible_gpus=0)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[check] update:")]
    assert lines == ["[check] update: runs every sequence: actor_rollout_ref.actor.use_kl_loss=true gives every token "
                     "a KL gradient, whatever its advantage (use_kl_loss=false to skip them)"]


def readme_example_mix(tmp_path) -> Path:
    """The README's `my_mix.yaml`, as a user saves it."""
    readme = (Path(REPO) / "README.md").read_text()
    block = readme.split("save this as `my_mix.yaml`:")[1].split("```yaml\n")[1].split("```")[0]
    path = tmp_path / "my_mix.yaml"
    path.write_text(block)
    return path


def test_a_held_out_task_whose_prompts_cannot_fit_is_one_check_line(tiny_model_dir, small, tmp_path, capsys):
    """The README's example mix on the quickstart (128 prompt tokens): number_sorting, only in the validation set,
    ended in a traceback from the validation set; now the launch stops first, naming the task and the value."""
    mix = readme_example_mix(tmp_path)
    code = run(compose_config("quickstart", small + [f"env.mix={mix}", "data.max_prompt_length=128"]))
    err = capsys.readouterr().err
    assert code == 2 and "nothing was started" in err, err
    line = next(line for line in err.splitlines() if "task number_sorting:" in line)  # the tiny tokenizer's counts
    assert "raise data.max_prompt_length to at least" in line


def test_checks_stop_before_anything_starts(tiny_model_dir, small, capsys):
    code = run(compose_config("quickstart", small + ["actor_rollout_ref.actor.ppo_mini_batch_size=32"]))
    err = capsys.readouterr().err
    assert code == 2 and "nothing was started" in err and "ppo_mini_batch_size=32" in err


@pytest.mark.slow
def test_cli_runs_the_preflight_without_a_gpu(tiny_model_dir, small, tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *small, "preflight=true",
           f"hydra.run.dir={tmp_path}"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[preflight] preflight=true" in done.stdout and "all checks passed" in done.stdout
    assert "device: cpu" in done.stdout and "ray init" not in done.stdout  # checked, nothing trained


@pytest.mark.parametrize("model", ["llama3.2-3b", "llama3.2-1b"])
def test_the_external_math_experiment_passes_the_preflight_with_each_llama_preset(model, small, capsys):
    """configs/external_math.yaml with each Llama preset, on tiny stand-in weights (Meta's are gated on the hub). The
    tiny model's offline-trained tokenizer writes its prompts longer than real ones (up to 662 tokens; SmolLM2's at
    most 357 of the config's 512), hence the larger prompt limit here."""
    overrides = [o for o in small if not o.startswith(("model=", "data.max_prompt_length="))]
    cfg = compose_config("external_math", overrides + [f"model={model}", "actor_rollout_ref.model.path=offline:tiny",
                                                       "data.max_prompt_length=768", "preflight=true"])
    assert cfg.env.eval_suite == "configs/eval/external_math.yaml"
    code = run(cfg)
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "all checks passed" in out and "intermediate_integration" in out
