"""The update leaves out zero-advantage sequences exactly (training/zero_advantage/rules.py, training/zero_advantage/engine.py).

The engine's updates run in their own process (tests/training/skip_update.py: verl's platform is read when verl
is first imported, and the engine needs a process group): the CPU backend's real engine, verl's real loss.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.launch.config import compose_config
from training.zero_advantage.rules import load_skip_engine, skip_line, skip_refusal

REPO = Path(__file__).resolve().parents[2]
MOVING = "0,3,4,7,10"  # 5 of 12 rows in micro-batches of 2: three micro-batches run, one zero row among them


def updates(model_dir: Path, *args: str) -> dict | list:
    done = subprocess.run([sys.executable, "tests/training/skip_update.py", *(str(a) for a in (model_dir, *args))],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_an_update_without_the_zero_advantage_rows_is_verls_update(tiny_model_dir, loss_agg_mode):
    """Same start, same batch: gradients and weights after one AdamW step equal verl's to float rounding, while the
    skip ran half the rows; the step itself is far larger than the difference."""
    result = updates(tiny_model_dir, loss_agg_mode, MOVING)
    assert result["same_start"] == 0.0
    assert result["grad_relative"] < 1e-6 and result["weight_relative"] < 1e-6
    assert result["verl_step"] > 1e-5 and result["skip_step"] > 1e-5  # both moved the weights (lr 3e-5)
    skipped = result["skip_metrics"]
    assert skipped["update_skipped/sequences"] == [0.5] and skipped["update_skipped/optimizer_step"] == [0.0]
    assert 0.5 < skipped["update_skipped/tokens"][0] < 1  # the row topped up is the shortest zero row


def test_a_mini_batch_without_a_moving_row_takes_no_optimizer_step(tiny_model_dir):
    """verl steps AdamW on zero gradients (weight decay moves every weight); the skip leaves them as they were."""
    result = updates(tiny_model_dir, "token-mean", "")
    assert result["skip_step"] == 0.0 and result["verl_step"] > 0
    assert result["skip_metrics"] == {"update_skipped/sequences": [1.0], "update_skipped/tokens": [1.0],
                                      "update_skipped/optimizer_step": [1.0]}


def test_every_rank_runs_the_same_whole_micro_batches():
    """Two gloo ranks, micro-batches of 2: rank 0 has 3 moving rows, rank 1 none; both run 4 rows (the moving ones,
    then the shortest others), so FSDP's collectives pair up; with no moving row anywhere, neither runs any."""
    done = subprocess.run([sys.executable, "tests/training/skip_update.py", "ranks"], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    rank0, rank1 = json.loads(done.stdout.strip().splitlines()[-1])
    assert rank0 == {"rows": [0, 1, 2, 5], "nobody": []}  # row 1 is rank 0's shortest zero row (3 tokens)
    assert rank1 == {"rows": [0, 2, 4, 6], "nobody": []}  # rank 1's four shortest rows


def test_moving_rows_reads_the_response_tokens_only():
    from training.zero_advantage.engine import moving_rows

    nested = lambda rows: torch.nested.as_nested_tensor(rows, layout=torch.jagged)  # noqa: E731
    data = {"advantages": nested([torch.zeros(3), torch.tensor([0.0, 0.5]), torch.tensor([0.0, 2.0]),
                                  torch.tensor([float("nan")])]),
            "response_mask": nested([torch.ones(3, dtype=torch.int64), torch.ones(2, dtype=torch.int64),
                                     torch.tensor([1, 0]), torch.ones(1, dtype=torch.int64)])}
    assert moving_rows(data).tolist() == [False, True, False, True]  # a masked advantage moves nothing; NaN shows


@pytest.mark.parametrize("config, overrides, refusal", [
    ("quickstart", [], None),
    ("dapo", [], None),
    ("dr_grpo", [], None),
    ("grpo", [], "use_kl_loss=true"),
    ("quickstart", ["actor_rollout_ref.actor.entropy_coeff=0.001"], "entropy_coeff=0.001"),
    ("quickstart", ["env.skip_zero_advantage=false"], "env.skip_zero_advantage=false"),
    ("quickstart", ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"], "loss_mode=gspo"),
    ("dr_grpo", ["actor_rollout_ref.actor.loss_scale_factor=null"], "set loss_scale_factor"),
])
def test_the_launch_says_whether_the_update_skips_and_why_not(config, overrides, refusal):
    """The DAPO, Dr. GRPO and quickstart recipes skip; every config that cannot skip exactly is named with its key."""
    cfg = compose_config(config, overrides)
    if refusal is None:
        assert skip_refusal(cfg) is None
        assert skip_line(cfg).startswith("update: leaves out sequences whose advantage is 0")
    else:
        assert refusal in skip_refusal(cfg)
        assert skip_line(cfg).startswith("update: runs every sequence: ")


def test_a_cuda_run_loads_the_skip_engine_after_the_users_modules(monkeypatch):
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", "my_plugin")
    cfg = compose_config("dapo", [])
    load_skip_engine(cfg)
    load_skip_engine(cfg)
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "my_plugin,training.zero_advantage.engine"


def test_contract_verls_fsdp_engine_takes_the_normaliser_from_the_whole_batch():
    """What the skip relies on in verl 0.9.1: forward_backward_batch counts `loss_mask` tokens of the batch it is given
    into `batch_num_tokens` before splitting it (the skip hands the loss the whole mini-batch's count instead), the
    loss is `partial(ppo_loss, config=ActorConfig)` and reads the normalisers from the micro-batch, and agg_loss's
    sequence modes divide by the given global_batch_size and loss_scale_factor."""
    import inspect

    from verl.trainer.ppo import core_algos
    from verl.workers import engine_workers
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngine
    from verl.workers.utils import losses

    engine = inspect.getsource(FSDPEngine.forward_backward_batch)
    assert 'batch_num_tokens = data["loss_mask"].sum()' in engine
    assert engine.index("batch_num_tokens=batch_num_tokens.item()") < engine.index("prepare_micro_batches(")
    assert "self.loss_fn = partial(ppo_loss, config=actor_config)" in inspect.getsource(engine_workers)
    loss = inspect.getsource(losses.ppo_loss)
    assert 'config.global_batch_info["batch_num_tokens"] = data["batch_num_tokens"]' in loss
    assert 'config.global_batch_info["global_batch_size"] = data["global_batch_size"]' in loss
    mask = torch.ones(2, 5)
    loss_mat = torch.arange(10.0).reshape(2, 5)
    assert core_algos.agg_loss(loss_mat, mask, "token-mean", batch_num_tokens=20) == loss_mat.sum() / 20
    assert core_algos.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", global_batch_size=4,
                               loss_scale_factor=10) == loss_mat.sum() / 4 / 10
    assert core_algos.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", global_batch_size=4) == \
        loss_mat.sum() / 4 / 5  # without the factor: the padded width, which depends on the micro-batch's rows


def test_contract_the_vanilla_loss_gives_a_zero_advantage_token_no_gradient():
    """verl's clipped policy loss at advantage 0, with ratios inside and outside the clip range: gradient exactly 0."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    log_prob = torch.tensor([[-1.0, -0.2, -3.0, -0.5]], requires_grad=True)
    old = torch.tensor([[-1.5, -0.2, -0.1, -4.0]])
    config = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0,
                               "loss_agg_mode": "token-mean", "global_batch_info": {}, "tis_imp_ratio_cap": -1})
    loss, _ = get_policy_loss_fn("vanilla")(old_log_prob=old, log_prob=log_prob, advantages=torch.zeros(1, 4),
                                             response_mask=torch.ones(1, 4), loss_agg_mode="token-mean", config=config)
    loss.backward()
    assert torch.equal(log_prob.grad, torch.zeros(1, 4))
