"""GPU memory (training/launch/memory.py): every model preset states the card size its settings fit, and
`env.gpu_memory=24|48` applies its settings for that card, which pass verl's validation and our checks (the preflight
of a Qwen2.5-1.5B-sized run on a 24 GB card runs for real, on the tiny model's weights)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import open_dict

from training.launch.checks import batch_problems, hardware_problems
from training.launch.config import CONFIG_DIR, compose_config, validate_with_verl
from training.launch.memory import apply_gpu_memory, memory_settings
from training.train_grpo import run

PRESETS = sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_model_preset_states_its_memory_and_fits_smaller_cards_or_says_so(preset):
    text = (CONFIG_DIR / "model" / f"{preset}.yaml").read_text()
    assert "# Memory" in text or "Memory per GPU" in text, f"configs/model/{preset}.yaml: say what it needs"
    sized_for = compose_config("grpo", [f"model={preset}"]).env.memory.sized_for
    assert isinstance(sized_for, int) and sized_for > 0
    for card in (24, 48):
        cfg = compose_config("grpo", [f"model={preset}", f"env.gpu_memory={card}"])
        try:
            size, applied = apply_gpu_memory(cfg)
        except ValueError as refused:  # a card too small for every listed size: refused, saying what to do
            assert f"env.gpu_memory={card}" in str(refused) and "pick a smaller model" in str(refused)
            continue
        assert (size is None) == (card >= sized_for) and (size is None or size <= card)
        for gpus in (1, 2):
            with open_dict(cfg):
                cfg.trainer.n_gpus_per_node = gpus
            validate_with_verl(cfg)
            assert batch_problems(cfg) == [] and hardware_problems(cfg, gpus) == []


def test_the_largest_listed_size_that_fits_applies_and_the_command_line_wins():
    cfg = compose_config("grpo", ["model=qwen2.5-1.5b", "env.gpu_memory=40"])
    size, applied = apply_gpu_memory(cfg, command_line={"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"})
    assert size == 24 and cfg.actor_rollout_ref.actor.fsdp_config.param_offload is True
    assert cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu == 8  # the preset's, as if given on the line
    assert cfg.actor_rollout_ref.rollout.gpu_memory_utilization == 0.4
    assert memory_settings(compose_config("grpo", ["model=qwen2.5-1.5b", "env.gpu_memory=80"])) == (None, {})
    assert memory_settings(compose_config("grpo", ["model=qwen2.5-1.5b"])) == (None, {})
    with pytest.raises(ValueError, match="lists settings for 48 GB"):
        memory_settings(compose_config("grpo", ["model=qwen2.5-3b", "env.gpu_memory=24"]))
    with pytest.raises(ValueError, match="give the memory of one GPU in GB"):
        memory_settings(compose_config("grpo", ["env.gpu_memory=big"]))
    bad = compose_config("grpo", ["env.gpu_memory=24"])
    with open_dict(bad):
        bad.env.memory.smaller = {24: {"actor_rollout_ref.actor.no_such_key": 1}}
    with pytest.raises(ValueError, match="env.memory.smaller.24.actor_rollout_ref.actor.no_such_key: no such config"):
        apply_gpu_memory(bad)


def test_preflight_of_a_24_gb_setting(tiny_model_dir, tmp_path, capsys):
    """`preflight=true env.gpu_memory=24` with the Qwen2.5-1.5B preset (its weights: the tiny model's): the settings
    are applied, said on the console, and every check of the launch passes."""
    overrides = ["model=qwen2.5-1.5b", "env.gpu_memory=24", f"actor_rollout_ref.model.path={tiny_model_dir}",
                 "env.mix=quickstart",
                 "env.validation_size=4", "env.preflight.prompts=4", "env.preflight.samples=2",
                 "env.preflight.max_new_tokens=16", "env.preflight.length_check_items=8", "env.on_cpu=null",
                 f"trainer.default_local_dir={tmp_path / 'ckpt'}", "preflight=true"]
    code = run(compose_config("grpo", overrides))
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert ("[check] GPU memory: env.gpu_memory=24 applies the model preset's settings for 24 GB: "
            "actor_rollout_ref.model.enable_gradient_checkpointing=True, "
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2") in out
    assert "all checks passed" in out
