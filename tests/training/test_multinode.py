"""A Ray cluster of two nodes on this machine (ray.cluster_utils.Cluster: each node its own raylet, CPUs and one
logical GPU slot), joined through RAY_ADDRESS: `trainer.nnodes=2` trains through the CPU backend (one FSDP2 rank per
node over gloo), saves, resumes in a new driver and exports, as a user of a real multi-node cluster would. Bypass mode is
off (a GPU run's setting): the two ranks recompute the old log-probs, compared with the rollout's (the guard of
test_train.py's two-rank run on one node, extended).

`extended`: CI trains the same two-rank run across two nodes through SLURM, checkpoint, resume and export included
(tests/training/test_slurm.py); this one is for a machine without SLURM (`make test-extended`)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.test_train import PROMPTS, SAMPLES, run_logs, step_metrics, train

REPO = Path(__file__).resolve().parents[2]
# two ranks, one per node (tests/training/test_slurm.py's SLURM script sets the node and GPU counts itself)
TWO_RANKS = ["algorithm.rollout_correction.bypass_mode=false", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
             "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"]
TWO_NODES = ["trainer.nnodes=2", "trainer.n_gpus_per_node=1", *TWO_RANKS]


def check_two_rank_steps(run_dir: Path, steps: int) -> None:
    """Each step sampled the whole batch and the two ranks' recomputed log-probs agree with the rollout's; the
    checkpoint of the last step holds one shard per rank."""
    for step in range(1, steps + 1):
        metrics = step_metrics(run_logs(run_dir), step)
        assert metrics["env/samples"] == PROMPTS * SAMPLES and metrics["training/rollout_probs_diff_mean"] < 1e-3
    actor = run_dir / "ckpt" / f"global_step_{steps}" / "actor"
    assert sorted(p.name for p in actor.glob("model_world_size_*")) == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(1800)
def test_two_node_cluster_trains_saves_resumes_and_exports(tmp_path, tiny_run, monkeypatch):
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 10, "num_gpus": 1})
    try:
        cluster.add_node(num_cpus=8, num_gpus=1)
        cluster.wait_for_nodes()
        monkeypatch.setenv("RAY_ADDRESS", cluster.address)
        first = train(tiny_run, tmp_path, "cpu", 2, *TWO_NODES)
        assert f"joining the Ray cluster at {cluster.address}: 2 node(s), 18 CPUs, 2 GPU slots" in first
        check_two_rank_steps(tmp_path, 2)
        resumed = train(tiny_run, tmp_path, "cpu", 3, *TWO_NODES, "trainer.save_freq=3")
        assert f"resuming {tmp_path / 'ckpt'} from step 2 of 3" in resumed and "step:1 - " not in resumed
        assert step_metrics(run_logs(tmp_path), 3)["env/samples"] == PROMPTS * SAMPLES
    finally:
        cluster.shutdown()
    export = subprocess.run([sys.executable, "utils/load_fsdp_to_hf.py", str(tmp_path / "ckpt"), str(tmp_path / "hf"),
                             "--dtype", "fp32", "--verify", "--quiet"], cwd=REPO,
                            env=dict(os.environ, HF_HUB_OFFLINE="1"), capture_output=True, text=True, timeout=600)
    assert export.returncode == 0, export.stdout[-3000:] + export.stderr[-3000:]
    assert (tmp_path / "hf" / "config.json").is_file()
