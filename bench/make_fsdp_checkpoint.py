"""Write a real verl FSDP2 checkpoint on CPU: verl's FSDPCheckpointManager under torchrun on gloo.

The exporter's tests and benchmark need checkpoints laid out exactly as verl writes them during training, not a
hand-made imitation. This script shards a Hugging Face model with verl's own `apply_fsdp2`, optionally wraps it in a
LoRA adapter (peft) and takes optimizer steps so the weights move, then saves with `FSDPCheckpointManager` into
`OUT/global_step_N/actor` and writes `OUT/latest_checkpointed_iteration.txt` as verl's trainer does.

    python bench/make_fsdp_checkpoint.py --model DIR --out EXP_DIR [--world-size 2] [--replicas 1] [--steps 1]
        [--lora-rank 0]
        [--reference]   # also write OUT/reference_fp32.safetensors: the full fp32 state dict gathered by FSDP

The launcher re-runs this file under `python -m torch.distributed.run` with `--worker`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="HF model folder to start from")
    p.add_argument("--out", required=True, help="experiment folder (verl's trainer.default_local_dir)")
    p.add_argument("--world-size", type=int, default=2, help="number of ranks (torchrun processes)")
    p.add_argument("--replicas", type=int, default=1,
                   help="HSDP: replicate over this many groups (mesh ('ddp', 'fsdp') = (R, W / R))")
    p.add_argument("--step", type=int, default=1, help="N in global_step_N")
    p.add_argument("--steps", type=int, default=1, help="AdamW steps before saving (0: save the initial weights)")
    p.add_argument("--lora-rank", type=int, default=0, help="wrap the model in a peft LoRA adapter of this rank")
    p.add_argument("--lora-alpha", type=int, default=16, help="LoRA alpha")
    p.add_argument("--no-optimizer", action="store_true", help="save model and extra state only (saves disk)")
    p.add_argument("--reference", action="store_true", help="also save the gathered fp32 state dict")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def launch(args: argparse.Namespace) -> None:
    """Run this file under torchrun with `args.world_size` CPU ranks."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.world_size}",
           __file__, "--worker", *sys.argv[1:]]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run(cmd, check=True, env=env)


def build_model(args: argparse.Namespace):
    """The HF model in fp32 (verl trains fp32 master weights), wrapped in LoRA if asked."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    if args.lora_rank:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=args.lora_rank, lora_alpha=args.lora_alpha, task_type="CAUSAL_LM",
                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], init_lora_weights=True)
        model = get_peft_model(model, config)
    return model


def train_steps(model, optimizer, vocab: int, steps: int) -> None:
    """A few next-token steps on fixed random tokens, so saved weights (and LoRA B) differ from their init."""
    import torch

    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        ids = torch.randint(0, vocab, (2, 16), generator=gen)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def worker(args: argparse.Namespace) -> None:
    """One rank: shard with verl's apply_fsdp2, train, save with FSDPCheckpointManager."""
    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import apply_fsdp2, get_fsdp_full_state_dict

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = build_model(args)
    if args.replicas > 1:
        mesh = init_device_mesh("cpu", (args.replicas, world // args.replicas), mesh_dim_names=("ddp", "fsdp"))
    else:
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))
    apply_fsdp2(model, {"mesh": mesh, "reshard_after_forward": True}, {})
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    train_steps(model, optimizer, model.config.vocab_size, args.steps)
    contents = ["model", "extra"] if args.no_optimizer else ["model", "optimizer", "extra"]
    manager = FSDPCheckpointManager(
        model=model, optimizer=optimizer, lr_scheduler=None,
        processing_class=AutoTokenizer.from_pretrained(args.model),
        checkpoint_config=OmegaConf.create({"save_contents": contents, "load_contents": contents}))
    out = Path(args.out)
    manager.save_checkpoint(str(out / f"global_step_{args.step}" / "actor"), global_step=args.step)
    if args.reference:
        full = get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
        if rank == 0:
            from safetensors.torch import save_file

            save_file({k: v.contiguous().clone() for k, v in full.items()}, str(out / "reference_fp32.safetensors"))
    if rank == 0:
        (out / "latest_checkpointed_iteration.txt").write_text(str(args.step))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    parsed = parse_args()
    worker(parsed) if parsed.worker else launch(parsed)
