"""Shared fixtures: offline mode, the tiny model, repository paths."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

REPO = Path(__file__).resolve().parents[1]
MIXES = REPO / "configs" / "mix"


# A training run that takes ~2 minutes on 2 CPU cores: tiny model, 2 prompts x 4 samples, 24-token responses. The
# random tiny model writes to every limit, so cut responses are scored as they are (the quickstart's "zero" would
# score every response 0: no gradient).
TINY_RUN = ["model=tiny", "env.reward.truncated=as_is", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "data.max_prompt_length=768",
            "data.max_response_length=24", "env.validation_size=4", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.logger=[console]"]


@pytest.fixture(scope="session")
def tiny_run() -> list[str]:
    """Hydra overrides for a short real training run on the tiny model (see TINY_RUN)."""
    return list(TINY_RUN)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from utils.offline_models import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def pytest_collection_modifyitems(config, items):
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: `make test` hands out files in collection order
        # files with slow tests first, so that the workers' last files are short ones and they finish together
        # (a stable sort: each file keeps its tests' order, and every worker sorts the same way, as xdist requires)
        slow_files = {item.path for item in items if item.get_closest_marker("slow")}
        items.sort(key=lambda item: item.path not in slow_files)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
