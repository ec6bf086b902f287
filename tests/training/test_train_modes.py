"""The other ways a run trains, through `python training/train_grpo.py` on the tiny model (the helpers of
test_train.py): dynamic sampling on the curriculum config (here on CUDA only: on the CPU, test_shipped_configs.py's
launches of `dapo` and `curriculum_spell_backward` check the same and more, and a launch costs over a minute of CI),
two CPU ranks sharding the actor over gloo, and the colocated async trainer through a checkpoint and a resume."""

import json
import os
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from tests.training.test_train import (DEVICES, NOISY, PROMPTS, REPO, SAMPLES, dumped_prompts, run_logs, step_metrics,
                                       train)


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("device", DEVICES[1:])  # CPU: test_shipped_configs.py (dapo, curriculum_spell_backward)
def test_dynamic_sampling_on_the_curriculum_config(device, tmp_path, tiny_run):
    """DAPO dynamic sampling refills dropped groups from the stream; the curriculum config trains alongside."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    train(tiny_run, tmp_path, device, 2, "algorithm.filter_groups.enable=true",
          "algorithm.filter_groups.max_num_gen_batches=20",
          f"reward.custom_reward_function.path={REPO / 'tests' / 'noisy_reward.py'}",
          "trainer.save_freq=-1", config="curriculum_spell_backward")
    dropped = 0.0
    for step in (1, 2):
        metrics = step_metrics(run_logs(tmp_path), step)
        assert metrics["env/zero_variance_groups"] == 0.0  # verl kept only groups with a signal
        assert metrics["sampling/dropped_read_failures"] == 0.0  # the groups verl dropped were read before clearing
        dropped += metrics["sampling/dropped_groups"]
        assert metrics["env/samples"] == PROMPTS * SAMPLES
        assert "curriculum/spell_backward/level" in metrics
    print(f"groups verl dropped and the trainer observed: {dropped:.0f}")


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(900)
def test_two_cpu_ranks_shard_the_actor_over_gloo(tmp_path, tiny_run):
    """Two training ranks on the CPU backend: FSDP2 shards over gloo, one rollout replica per rank. (`extended`:
    test_multinode.py's run checks the same two ranks over gloo, bypass off, across two nodes.)"""
    # bypass off: the old log-probs are recomputed by the sharded actor and compared with the rollout's; the noisy
    # reward gives the ranks different numbers of moving rows, which the update's skip evens out (same micro-batches)
    train(tiny_run, tmp_path, "cpu", 1, "trainer.n_gpus_per_node=2", "trainer.save_freq=1", *NOISY,
          "algorithm.rollout_correction.bypass_mode=false", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
          "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
          "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4")
    metrics = step_metrics(run_logs(tmp_path), 1)
    assert metrics["training/rollout_probs_diff_mean"] < 1e-3 and metrics["env/samples"] == PROMPTS * SAMPLES
    actor = tmp_path / "ckpt" / "global_step_1" / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]
    assert json.loads((actor / "fsdp_config.json").read_text())["FSDP_version"] == 2  # two ranks keep FSDP2


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_async_mode_trains_checkpoints_resumes_and_exports(tiny_run, tmp_path):
    """trainer.v1.trainer_mode=reasoning_gym_async (verl's colocated async trainer) on the CPU backend: two steps and
    a checkpoint, a new process resumes for step 3 from it, with the prompts that were in flight restored from
    TransferQueue's checkpoint; the export loads. Each response counts in the one step that trained it, no prompt is
    trained twice, and none is staler than the off-policy bound."""
    mode = "trainer.v1.trainer_mode=reasoning_gym_async"
    first = train(tiny_run, tmp_path, "cpu", 2, mode, *NOISY)
    resumed = train(tiny_run, tmp_path, "cpu", 3, mode, "trainer.save_freq=3", *NOISY)
    assert (tmp_path / "ckpt" / "global_step_2" / "transfer_queue").is_dir()
    assert "step:1 - " not in resumed and "training prompt groups from TransferQueue" in resumed
    trained = [prompt for step in (1, 2, 3) for prompt in dumped_prompts(tmp_path, step)]
    assert len(trained) == len(set(trained)) == 3 * PROMPTS
    bound = compose_config_value(tiny_run, "trainer.v1.sampler.max_off_policy_threshold")
    for step in (1, 2, 3):
        metrics = step_metrics(run_logs(tmp_path), step)
        assert metrics["env/samples"] == PROMPTS * SAMPLES and metrics["actor/grad_norm"] > 0
        assert 0.0 <= metrics["async/carried_over"] <= 1.0
        assert metrics["training/off_policy/trajectory_staleness_worst/max"] + 1 <= bound
    assert "carried over" in first + resumed  # the step line's note
    export = subprocess.run([sys.executable, "utils/load_fsdp_to_hf.py", str(tmp_path / "ckpt"), str(tmp_path / "hf"),
                             "--dtype", "fp32", "--verify", "--quiet"], cwd=REPO, capture_output=True, text=True,
                            timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
    assert export.returncode == 0, export.stdout[-3000:] + export.stderr[-3000:]
    assert (tmp_path / "hf" / "config.json").is_file()


def compose_config_value(tiny_run: list[str], key: str):
    from training.launch.config import compose_config

    return OmegaConf.select(compose_config("quickstart", tiny_run), key)
