"""Two GRPO steps of `quickstart` on a real GPU, a checkpoint, and a resume that continues the stream.

Needs a CUDA GPU and the GPU stack (`make install-gpu`); skipped elsewhere.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def train(tmp_path: Path, steps: int) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart",
           f"trainer.total_training_steps={steps}", "trainer.save_freq=1", "trainer.test_freq=2",
           "env.validation_size=8", "trainer.logger=[console]", f"trainer.default_local_dir={tmp_path / 'ckpt'}",
           f"hydra.run.dir={tmp_path / 'hydra'}", "+ray_kwargs.ray_init.num_cpus=16"]
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=os.environ.get("CUDA_VISIBLE_DEVICES", "0"))
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-5000:]
    return done


def stream_state(step_dir: Path) -> dict:
    return torch.load(step_dir / "data.pt", weights_only=False)["dataset_state"]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_two_steps_checkpoint_and_resume(tmp_path):
    first = train(tmp_path, steps=2)
    ckpt = tmp_path / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (ckpt / "global_step_2" / "actor").is_dir()
    assert "env/zero_variance_groups" in first.stdout and "timing/data" in first.stdout
    after_two = stream_state(ckpt / "global_step_2")
    assert after_two["consumed"] >= 2 * 16

    train(tmp_path, steps=3)  # resume_mode=auto picks up global_step_2
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    after_three = stream_state(ckpt / "global_step_3")
    assert after_two["consumed"] + 16 <= after_three["consumed"] < after_two["consumed"] + 2 * 16
