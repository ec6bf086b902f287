"""reasoning-gym training configs imported as ours: every key accounted for, the mix and env keys right, our checks
applied, and each published experiment family passing preflight=true on the tiny model.

The configs are written here in their schema (their own sections over an early-2025 verl's full config), one per
experiment family: inter-domain generalisation, intra-domain generalisation (task configs, cosine + format rewards),
and the curriculum experiments (a hydra header, no datasets, curricula with attribute levels).
"""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from training.import_reference.reference_keys import leaves
from training.import_reference.translate import ImportProblem, main, translate
from training.launch.checks import hardware_problems
from training.launch.config import compose_config, resolve_config
from training.train_grpo import run

REPO = Path(__file__).resolve().parents[3]

VERL_OLD = {  # the verl part of their files: an early-2025 verl's keys, as their configs set them
    "data": {"tokenizer": None, "train_files": "train.parquet", "val_files": "test.parquet", "prompt_key": "prompt",
             "max_prompt_length": 512, "max_response_length": 1024, "train_batch_size": 32, "val_batch_size": 64,
             "return_raw_chat": True, "return_raw_input_ids": True},
    "actor_rollout_ref": {
        "hybrid_engine": True,
        "model": {"path": "Qwen/Qwen2.5-3B-Instruct", "external_lib": None, "override_config": {},
                  "enable_gradient_checkpointing": True, "use_remove_padding": True},
        "actor": {"strategy": "fsdp", "ppo_mini_batch_size": 16, "ppo_micro_batch_size": None,
                  "ppo_micro_batch_size_per_gpu": 4, "use_dynamic_bsz": False, "ppo_max_token_len_per_gpu": 12288,
                  "grad_clip": 1.0, "clip_ratio": 0.2, "entropy_coeff": 0.001, "use_kl_loss": True,
                  "kl_loss_coef": 0.001, "kl_loss_type": "low_var_kl", "ppo_epochs": 1, "shuffle": False,
                  "optim": {"lr": "1e-6", "lr_warmup_steps_ratio": 0.0, "min_lr_ratio": None,
                            "warmup_style": "constant", "total_training_steps": 500},
                  "fsdp_config": {"wrap_policy": {"min_num_params": 0}, "param_offload": False,
                                  "optimizer_offload": False, "fsdp_size": -1}},
        "ref": {"fsdp_config": {"param_offload": True}, "log_prob_micro_batch_size": None,
                "log_prob_micro_batch_size_per_gpu": 160,
                "log_prob_use_dynamic_bsz": "${actor_rollout_ref.actor.use_dynamic_bsz}"},
        "rollout": {"name": "vllm", "temperature": 1.0, "top_k": -1, "top_p": 1,
                    "prompt_length": "${data.max_prompt_length}", "response_length": "${data.max_response_length}",
                    "dtype": "bfloat16", "gpu_memory_utilization": 0.7, "ignore_eos": False, "enforce_eager": True,
                    "free_cache_engine": True, "load_format": "dummy_dtensor", "tensor_model_parallel_size": 4,
                    "max_num_batched_tokens": 12288, "max_num_seqs": 1024, "log_prob_micro_batch_size_per_gpu": 160,
                    "disable_log_stats": True, "enable_chunked_prefill": True, "do_sample": True,
                    "use_fire_sampling": False, "max_model_len": 12288, "n": 8, "val_kwargs": {"do_sample": True}}},
    "algorithm": {"gamma": 1.0, "lam": 1.0, "adv_estimator": "grpo", "kl_penalty": "kl",
                  "kl_ctrl": {"type": "fixed", "kl_coef": 0.001}},
    "verbose": True,
    "trainer": {"balance_batch": True, "total_epochs": 1, "total_training_steps": 500, "project_name": "rg-test",
                "experiment_name": "mine", "logger": ["console", "wandb"], "val_generations_to_log_to_wandb": 0,
                "nnodes": 1, "n_gpus_per_node": 4, "save_freq": 100, "resume_mode": "auto",
                "resume_from_path": False, "test_freq": 100, "critic_warmup": 0, "default_hdfs_dir": None,
                "remove_previous_ckpt_in_save": False, "del_local_ckpt_after_load": False,
                "default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}"},
    "critic": {"strategy": "fsdp", "optim": {"lr": "1e-5"}, "model": {"path": "~/models/deepseek-llm-7b-chat"}},
    "reward_model": {"enable": False, "strategy": "fsdp", "model": {"path": "~/models/FsfairX-LLaMA3-RM-v0.1"}},
}
OFF_CURRICULUM = {"enabled": False, "schedule": {"automatic": True, "update_steps": 30}, "last_k": 20,
                  "success_threshold": 0.7, "failure_threshold": 0.1,
                  "curricula": {"spell_backward": {"attribute_levels": {"word_len": 0}}}}
FORMAT = {"name": "format", "scaling_factor": 0.2, "kwargs": {"preappend_thinking_token": False}}
FAMILIES = {
    "inter": {"reasoning_gym": {"dataset_size": 20000, "developer_prompt": "DeepSeekZero",
                                "datasets": {"caesar_cipher": {"weight": 1}, "base_conversion": {"weight": 1},
                                             "rotate_matrix": {"weight": 1}}},
              "curriculum": OFF_CURRICULUM, "reward": {"use_accuracy": True, "secondary_rewards": [FORMAT]}},
    "intra": {"reasoning_gym": {"dataset_size": 20000, "developer_prompt": "DeepSeekZero", "datasets": {
                  "simple_equations": {"weight": 0.5, "config": {"min_terms": 2, "max_terms": 4}},
                  "basic_arithmetic": {"weight": 0.5, "config": {"min_terms": 2, "max_terms": 4, "min_digits": 1,
                                                                 "max_digits": 2}}}},
              "curriculum": OFF_CURRICULUM,
              "reward": {"use_accuracy": True, "conditional_reward": False,
                         "secondary_rewards": [{"name": "cosine", "scaling_factor": 0.3}, FORMAT]}},
    "curriculum": {"hydra": {"searchpath": ["file:///home/someone/verl/verl/trainer/config"]},
                   "defaults": ["ppo_trainer", "_self_"],
                   "reasoning_gym": {"dataset_size": 20000, "developer_prompt": "DeepSeekZero", "datasets": None},
                   "curriculum": {**OFF_CURRICULUM, "enabled": True, "schedule": {"automatic": False,
                                                                                  "update_steps": 30},
                                  "last_k": 5120, "curricula": {"spell_backward": {"attribute_levels":
                                                                                   {"word_len": 0}}}},
                   "reward": {"use_accuracy": True, "secondary_rewards": [
                       {"name": "cosine", "scaling_factor": 0.3}, FORMAT]}},
    # external_benchmarks/maths_llama_3b: Llama-3.2-3B-Instruct on nine maths tasks (their model path: their_config)
    "external": {"reasoning_gym": {"dataset_size": 40000, "developer_prompt": "DeepSeekZero", "datasets": {
                     task: {"weight": 1} for task in (
                         "complex_arithmetic", "intermediate_integration", "polynomial_equations",
                         "polynomial_multiplication", "simple_geometry", "bitwise_arithmetic", "chain_sum",
                         "decimal_arithmetic", "decimal_chain_sum")}},
                 "curriculum": OFF_CURRICULUM,
                 "reward": {"use_accuracy": True, "secondary_rewards": [
                     {"name": "cosine", "scaling_factor": 0.3}, FORMAT]}},
}
MODEL = {"external": "meta-llama/Llama-3.2-3B-Instruct"}
# the tiny model's offline-trained tokenizer writes the maths prompts up to 662 tokens (SmolLM2's: 357 of their 512)
TINY_TOKENIZER = {"external": ["data.max_prompt_length=768"]}
PREFLIGHT = ["actor_rollout_ref.model.path=offline:tiny", "preflight=true", "env.preflight.prompts=4",
             "env.preflight.samples=2", "env.preflight.max_new_tokens=16", "env.preflight.length_check_items=8",
             "env.validation_size=4"]


def their_config(family: str) -> dict:
    raw = {**copy.deepcopy(FAMILIES[family]), **copy.deepcopy(VERL_OLD)}
    raw["actor_rollout_ref"]["model"]["path"] = MODEL.get(family, raw["actor_rollout_ref"]["model"]["path"])
    return raw


def imported(tmp_path: Path, family: str, **changes) -> Path:
    """Writes their config for `family`, imports it into tmp_path/out; returns the out folder."""
    raw = their_config(family)
    raw.update(changes)
    src = tmp_path / f"{family}_qwen_3b.yaml"
    src.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert main([str(src), "--out-dir", str(tmp_path / "out"), "--name", family]) == 0
    return tmp_path / "out"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_key_of_theirs_is_in_the_report(family):
    raw = their_config(family)
    keys = [row[0] for row in translate(raw, "x.yaml").rows]
    for key, _ in leaves(raw):
        section = key.split(".")[0]
        covered = any(k.startswith(key) or key.startswith(k.split(" ")[0].rstrip("*")) for k in keys)
        assert covered or f"{section}.*" in keys or section in keys, key


def test_inter_keys_land_where_they_belong(tmp_path):
    out = imported(tmp_path, "inter")
    cfg = compose_config("inter", config_dir=out)
    assert cfg.env.system_prompt == "DeepSeekZero" and cfg.env.reward.format_reward == 0.2
    assert yaml.safe_load(Path(cfg.env.mix).read_text())["tasks"] == {
        "caesar_cipher": {"weight": 1, "config": {}}, "base_conversion": {"weight": 1, "config": {}},
        "rotate_matrix": {"weight": 1, "config": {}}}
    opt = cfg.actor_rollout_ref.actor.optim
    assert opt.lr == 1e-6 and opt.lr_scheduler_type == "constant" and opt.min_lr_ratio == 0.0
    assert cfg.trainer.log_val_generations == 0 and cfg.trainer.n_gpus_per_node == 4
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 4
    assert cfg.actor_rollout_ref.rollout.load_format == "dummy" and cfg.data.train_files is None
    assert cfg.trainer.experiment_name == "mine" and cfg.trainer.resume_from_path is None
    assert cfg.reward.custom_reward_function.path == "pkg://envs.verl_reward"  # ours, not their reward section
    report = (out / "inter.import.md").read_text()
    assert "| `reasoning_gym.dataset_size` | removed | the stream is unlimited" in report
    assert "| `trainer.val_generations_to_log_to_wandb` | renamed | trainer.log_val_generations" in report
    # their GPU keys meet our usual check: 4 GPUs asked for, 2 visible
    problems = hardware_problems(resolve_config(cfg, gpu_count=2), 2)
    assert any("trainer.n_gpus_per_node=4 but only 2 GPU(s) are visible" in p for p in problems)


def test_the_external_benchmark_experiment_keeps_its_model_and_mix_and_runs_on_two_gpus_as_their_readme_says(
        tmp_path, repo):
    """external_benchmarks/maths_llama_3b: their Llama model and nine tasks, the same as configs/external_math.yaml
    trains on; with their README's two-GPU overrides our checks pass."""
    out = imported(tmp_path, "external")
    cfg = compose_config("external", [], config_dir=out)
    assert cfg.actor_rollout_ref.model.path == "meta-llama/Llama-3.2-3B-Instruct" and cfg.env.reward.format_reward == 0.2
    theirs = yaml.safe_load((out / "external.mix.yaml").read_text())["tasks"]
    ours = yaml.safe_load((repo / "configs" / "mix" / "external_math.yaml").read_text())["tasks"]
    assert {t: w["weight"] for t, w in theirs.items()} == {t: w["weight"] for t, w in ours.items()}
    two = compose_config("external", ["actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                                      "trainer.n_gpus_per_node=2"], config_dir=out)
    assert hardware_problems(resolve_config(two, gpu_count=2), 2) == []


def test_intra_and_curriculum_translations(tmp_path):
    intra = imported(tmp_path, "intra")
    mix = yaml.safe_load((intra / "intra.mix.yaml").read_text())
    assert mix["tasks"]["simple_equations"] == {"weight": 0.5, "config": {"min_terms": 2, "max_terms": 4}}
    report = (intra / "intra.import.md").read_text()
    assert "(cosine)` | removed | no cosine length reward here" in report
    assert "`reward.conditional_reward` | ignored" in report
    cur = imported(tmp_path, "curriculum")
    mix = yaml.safe_load((cur / "curriculum.mix.yaml").read_text())
    assert mix["tasks"] == {"spell_backward": {"weight": 1.0, "level": 0}}
    assert mix["curriculum"] == {"enabled": True, "window": 5120, "promote_at": 0.7, "demote_at": 0.1,
                                 "min_samples": 256}
    assert "`hydra` | replaced" in (cur / "curriculum.import.md").read_text()


def test_mixed_attribute_levels_are_approximated_and_said(tmp_path):
    raw = their_config("curriculum")
    raw["curriculum"]["curricula"] = {"mini_sudoku": {"attribute_levels": {"empty": 2}},
                                      "spell_backward": {"attribute_levels": {"word_len": 1}, "weight": 2.0}}
    out = translate(raw, "x.yaml")
    assert out.mix["tasks"] == {"mini_sudoku": {"weight": 1.0, "level": 2}, "spell_backward": {"weight": 2.0,
                                                                                               "level": 1}}
    raw["curriculum"]["curricula"] = {"base_conversion": {"attribute_levels": {"base": 0, "value": 2}}}
    out = translate(raw, "x.yaml")
    assert out.mix["tasks"]["base_conversion"]["level"] == 0
    assert any(action == "approximated" and "{'base': 0, 'value': 2}" in where for _, action, where in out.rows)


def test_bad_inputs_name_the_file_key_and_fix(tmp_path, capsys):
    with pytest.raises(ImportProblem, match="not a reasoning-gym training config.*evaluate_model.py"):
        translate({"model_path": "x", "categories": []}, "eval.yaml")
    raw = their_config("inter")
    raw["reasoning_gym"]["datasets"]["caesar_cipher"]["wieght"] = 2
    with pytest.raises(ImportProblem, match=r"x.yaml: reasoning_gym.datasets.caesar_cipher: unknown key\(s\) \['wieght'\]"):
        translate(raw, "x.yaml")
    raw = their_config("curriculum")
    raw["curriculum"]["enabled"] = False
    with pytest.raises(ImportProblem, match="no tasks"):
        translate(raw, "x.yaml")
    imported(tmp_path, "inter")
    assert main([str(tmp_path / "inter_qwen_3b.yaml"), "--out-dir", str(tmp_path / "out"), "--name", "inter"]) == 2
    assert "--force" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_passes_preflight_on_the_tiny_model(tmp_path, family, capsys, tiny_model_dir):
    out = imported(tmp_path, family)
    cfg = compose_config(family, PREFLIGHT + TINY_TOKENIZER.get(family, []) + [
        f"trainer.default_local_dir={tmp_path / 'ckpt'}"], config_dir=out)
    code = run(cfg)
    printed = capsys.readouterr()
    assert code == 0, printed.out[-3000:] + printed.err[-3000:]
    assert "all checks passed" in printed.out


@pytest.mark.slow
def test_the_printed_command_runs_the_preflight(tmp_path, tiny_model_dir):
    out = imported(tmp_path, "curriculum")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    cmd = [sys.executable, "training/train_grpo.py", "--config-path", str(out), "--config-name", "curriculum",
           *PREFLIGHT, f"trainer.default_local_dir={tmp_path / 'ckpt'}", f"hydra.run.dir={tmp_path / 'hydra'}",
           "trainer.device=cpu"]  # on a GPU machine too: CUDA_VISIBLE_DEVICES='' with device auto is refused there
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all checks passed" in done.stdout and "spell_backward" in done.stdout


def test_their_earlier_curriculum_layout(tmp_path):
    """Their earlier files switch the curriculum on under reasoning_gym (enable_curriculum_learning, curricula)."""
    raw = their_config("inter")
    raw["reasoning_gym"] = {"dataset_size": 10000, "enable_curriculum_learning": True,
                            "curricula": {"spell_backward": {"attribute_levels": {"word_len": 2}}}}
    raw.pop("curriculum")
    raw["trainer"]["total_training_steps"] = None
    out = translate(raw, "x.yaml")
    assert out.mix["tasks"] == {"spell_backward": {"weight": 1.0, "level": 2}}
    assert out.mix["curriculum"]["enabled"] is True
    rows = {key: (action, where) for key, action, where in out.rows}
    assert rows["reasoning_gym.enable_curriculum_learning"][0] == "translated"
    assert rows["trainer.total_training_steps"] == ("kept ours", "null: our (or verl 0.9.1's) default 500 stays")
