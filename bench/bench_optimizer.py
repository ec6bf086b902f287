"""AdamW's step on the CPU actor's parameters: PyTorch's per-tensor loop (what verl's FSDP2 engine gets on a CPU)
against its foreach and fused implementations, in one process, on the same gradients.

    python bench/bench_optimizer.py                     # SmolLM2-135M, the CPU quickstart's model
    python bench/bench_optimizer.py --model tiny --steps 3

Why (issue 49): a py-spy profile of our CPU update put AdamW at 4.6% of `update_actor`, PyTorch's per-tensor loop
over FSDP2's DTensors. torch.optim.AdamW picks foreach only for CUDA tensors, so on a CPU it loops; verl's
`actor.optim.override_optimizer_config` passes `foreach` or `fused` through to it. The parameters are sharded as
verl's engine shards them on one CPU rank (fully_shard per decoder layer, then the model, over gloo, world size 1);
every arm starts from the same weights and takes `--steps` steps on the same fixed gradients. Reported: seconds per
step (the first apart: it allocates the moments) and the largest difference of any weight from the loop's after the
last step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/bench_optimizer.py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))

ARMS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model preset (configs/model): smollm2-135m or tiny")
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps per arm (the first is reported apart)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the CPU backend's actor uses the cores)")
    return parser.parse_args(argv)


def sharded_model(path: str):
    """The model in fp32, sharded as verl's FSDP2 engine shards it on one rank (needs the gloo group)."""
    import torch
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def run_arm(path: str, options: dict, steps: int, lr: float, weight_decay: float) -> tuple[list[float], list]:
    """`steps` AdamW steps with `options` on fixed gradients; returns (seconds per step, final full weights)."""
    import torch

    model = sharded_model(path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, **options)
    for index, param in enumerate(model.parameters()):
        param.grad = torch.full_like(param, 1e-3 * (1 + index % 7))
    seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.step()
        seconds.append(time.perf_counter() - start)
    return seconds, [param.detach().full_tensor().clone() for param in model.parameters()]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    from bench.bench_decode import quickstart_config

    cfg = quickstart_config(args.model)
    path = str(cfg.actor_rollout_ref.model.path)
    optim = cfg.actor_rollout_ref.actor.optim
    torch.set_num_threads(args.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        results = {name: run_arm(path, options, args.steps, float(optim.lr), float(optim.weight_decay))
                   for name, options in ARMS.items()}
    finally:
        dist.destroy_process_group()
    loop_weights = results["loop"][1]
    print(f"AdamW on {args.model} ({sum(w.numel() for w in loop_weights) / 1e6:.1f}M fp32 parameters, FSDP2 on one "
          f"gloo rank, {args.threads} threads), {args.steps} steps on fixed gradients\n")
    print("| arm | first step s | later steps s, mean | later steps | max abs weight diff vs loop |")
    print("|---|---:|---:|---|---:|")
    for name, (seconds, weights) in results.items():
        diff = max(float((a - b).abs().max()) for a, b in zip(loop_weights, weights))
        later = seconds[1:] or seconds
        print(f"| {name} | {seconds[0]:.3f} | {statistics.mean(later):.3f} | "
              f"{', '.join(f'{s:.3f}' for s in later)} | {diff:.2e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
