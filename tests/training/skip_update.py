"""One actor update on the CPU backend's real engine, with and without the zero-advantage skip, from the same weights.

    python tests/training/skip_update.py MODEL_DIR LOSS_AGG_MODE MOVING_ROWS   # prints one JSON line
    python tests/training/skip_update.py ranks                                 # rows_to_run on 2 gloo ranks

Run in its own process by tests/training/test_update_skip.py: verl reads its platform (VERL_PLATFORM=cpu) when it is
first imported, and the engine needs a process group. The batch has the fields and layout verl's v1 trainer hands
the actor's engine (nested prompts, responses, masks, advantages and old log-probs), 12 rows in micro-batches of 2;
MOVING_ROWS lists the rows whose advantage is not 0 (the others are 0 on every token, as a zero-variance group's).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.update(VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="training.cpu_backend")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from bench.bench_update_skip import build_engine, ppo_loss_function, update_batch  # noqa: E402

ROWS, MICRO = 12, 2


def batch(vocab_size: int, moving: set[int], skip: bool):
    """12 rows of random prompts (5-29 tokens) and responses (1-23), advantage N(0, 1) on the moving rows."""
    generator = torch.Generator().manual_seed(0)
    prompt_lengths = [int(n) for n in torch.randint(5, 30, (ROWS,), generator=generator)]
    response_lengths = [int(n) for n in torch.randint(1, 24, (ROWS,), generator=generator)]
    prompts = [torch.randint(1, vocab_size, (n,), generator=generator) for n in prompt_lengths]
    advantages = [torch.randn(n, generator=generator) if row in moving else torch.zeros(n)
                  for row, n in enumerate(response_lengths)]
    return update_batch(prompts, response_lengths, advantages, MICRO, skip, vocab_size)


def update(model_dir: str, loss_agg_mode: str, moving: set[int], skip: bool) -> dict:
    """Weights before and after one update, its gradients and its metrics."""
    engine = build_engine(model_dir, lr=3e-5, clip_grad=1e9)  # the quickstart's step size; clipping off
    params = dict(engine.module.named_parameters())
    before = {name: p.detach().clone() for name, p in params.items()}
    grads = {name: torch.zeros_like(p) for name, p in params.items()}  # as the optimizer got them (none: zeros)
    step = engine.optimizer_step

    def optimizer_step():
        grads.update({name: p.grad.clone() for name, p in params.items() if p.grad is not None})
        return step()

    engine.optimizer_step = optimizer_step
    with engine.train_mode():
        loss = ppo_loss_function(loss_agg_mode, ROWS, MICRO, 24 if loss_agg_mode == "seq-mean-token-sum-norm" else None)
        output = engine.train_batch(batch(engine.module.config.vocab_size, moving, skip), loss)
    after = {name: p.detach().clone() for name, p in params.items()}
    return {"before": before, "after": after, "grads": grads, "metrics": output["metrics"]}


def largest(pairs) -> float:
    return max(float((a - b).abs().max()) for a, b in pairs)


def main(model_dir: str, loss_agg_mode: str, moving_rows: str) -> None:
    moving = {int(row) for row in moving_rows.split(",") if row}
    with tempfile.NamedTemporaryFile() as store:
        dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
        verl_run = update(model_dir, loss_agg_mode, moving, skip=False)
        skip_run = update(model_dir, loss_agg_mode, moving, skip=True)
        dist.destroy_process_group()
    names = list(verl_run["after"])
    weight_scale = max(float(verl_run["after"][n].abs().max()) for n in names)
    step_scale = largest((verl_run["after"][n], verl_run["before"][n]) for n in names)
    grad_scale = max(float(verl_run["grads"][n].abs().max()) for n in names)
    print(json.dumps({
        "same_start": largest((verl_run["before"][n], skip_run["before"][n]) for n in names),
        "weight_relative": largest((verl_run["after"][n], skip_run["after"][n]) for n in names) / weight_scale,
        "step_relative": (largest((verl_run["after"][n], skip_run["after"][n]) for n in names) / step_scale
                          if step_scale else 0.0),
        "grad_relative": (largest((verl_run["grads"][n], skip_run["grads"][n]) for n in names) / grad_scale
                          if grad_scale else 0.0),
        "verl_step": step_scale,
        "skip_step": largest((skip_run["after"][n], skip_run["before"][n]) for n in names),
        "skip_metrics": {key: value for key, value in skip_run["metrics"].items() if key.startswith("update_skipped")},
        "verl_metrics": sorted(verl_run["metrics"]),

    }, default=float))


def rank_rows(rank: int, store: str, out: str) -> None:
    """rows_to_run on rank `rank` of 2: rank 0 has 3 moving rows of 8, rank 1 none."""
    from training.zero_advantage.engine import rows_to_run

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    moving = torch.tensor([True, False, True, False, False, True, False, False])
    if rank == 1:
        moving = torch.zeros(8, dtype=torch.bool)
    lengths = torch.tensor([9, 3, 7, 5, 8, 2, 6, 4]) if rank == 0 else torch.tensor([5, 9, 1, 7, 2, 8, 3, 6])
    nobody = rows_to_run(torch.zeros(8, dtype=torch.bool), lengths, 2, None)
    with open(f"{out}.{rank}", "w") as file:
        json.dump({"rows": rows_to_run(moving, lengths, 2, None).tolist(), "nobody": nobody.tolist()}, file)
    dist.destroy_process_group()


def ranks() -> None:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(rank_rows, args=(f"{folder}/store", f"{folder}/rows"), nprocs=2)
        print(json.dumps([json.load(open(f"{folder}/rows.{rank}")) for rank in (0, 1)]))


if __name__ == "__main__":
    ranks() if sys.argv[1:] == ["ranks"] else main(*sys.argv[1:4])
