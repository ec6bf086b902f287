"""Export a verl FSDP checkpoint to a Hugging Face model folder that loads in transformers and vLLM.

    python utils/load_fsdp_to_hf.py CHECKPOINT OUTPUT_DIR [--dtype bf16|fp16|fp32|auto] [--verify] [--force]
    python utils/load_fsdp_to_hf.py ACTOR_DIR HF_DIR OUTPUT_DIR [...]     # reasoning-gym's training/ form

CHECKPOINT is an experiment folder (its latest step is used), a `global_step_N` folder or its `actor/` folder. With
three paths, as reasoning-gym's training README calls it, the model config and tokenizer come from HF_DIR instead of
`actor/huggingface`; nothing is ever written into ACTOR_DIR or HF_DIR.
Tensors stream from the memory-mapped shards into sharded safetensors, so memory stays far below the model's size;
`--dtype bf16` matches `python -m verl.model_merger merge --backend fsdp` bit for bit, `--dtype fp32` is the exact
fp32 state dict. The logic lives in utils/fsdp_checkpoint.py, utils/fsdp_export.py and utils/fsdp_verify.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils.fsdp_checkpoint import CheckpointError  # noqa: E402
from utils.fsdp_export import ExportOptions, export_checkpoint  # noqa: E402


def _opt(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass
class Args:
    """Command-line arguments (each field's help is its flag's help)."""

    checkpoint: str = _opt(None, "experiment folder, global_step_N folder or its actor/ folder")
    output_dir: str = _opt(None, "Hugging Face model folder to create")
    hf_dir: str | None = _opt(None, "folder with the model's config.json and tokenizer (the three-path form)")
    dtype: str = _opt("bf16", "bf16 | fp16 | fp32 | auto (keep the shards' dtype); bf16 matches verl's merger")
    verify: bool = _opt(False, "reload the result and compare every tensor with the shards")
    force: bool = _opt(False, "replace OUTPUT_DIR if it exists")
    lora: str = _opt("merge", "merge: LoRA folded into the weights; adapter: base model + OUTPUT_DIR/lora_adapter")
    lora_alpha: float | None = _opt(None, "LoRA alpha, only for checkpoints without lora_train_meta.json")
    base_model: str = _opt("", "HF folder of the base model, needed for LoRA-only checkpoints (save_lora_only)")
    max_shard_size: str = _opt("2GB", "largest safetensors file, e.g. 2GB or 500MB")
    quiet: bool = _opt(False, "no progress bar")


CHOICES = {"dtype": ["bf16", "fp16", "fp32", "auto"], "lora": ["merge", "adapter"]}


USAGE = """%(prog)s CHECKPOINT OUTPUT_DIR [options]
       %(prog)s ACTOR_DIR HF_DIR OUTPUT_DIR [options]   (reasoning-gym training/ form)"""
PATHS_HELP = ("CHECKPOINT OUTPUT_DIR: CHECKPOINT is an experiment folder, global_step_N or its actor/ folder, its model "
              "config and tokenizer read from actor/huggingface. ACTOR_DIR HF_DIR OUTPUT_DIR: the same, with the "
              "config and tokenizer read from HF_DIR (e.g. global_step_N/actor/huggingface or the base model folder)")


def parse_args(argv: list[str] | None = None) -> Args:
    """Build the parser from `Args`: two or three positional paths, flags for the rest."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage=USAGE)
    parser.add_argument("paths", nargs="+", metavar="PATH", help=PATHS_HELP)
    for f in fields(Args):
        flag, help = f"--{f.name.replace('_', '-')}", f.metadata["help"]
        if f.name in ("checkpoint", "output_dir", "hf_dir"):
            continue
        elif isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", help=help)
        else:
            kind = float if f.name == "lora_alpha" else str
            parser.add_argument(flag, type=kind, default=f.default, choices=CHOICES.get(f.name), help=help)
    values = vars(parser.parse_intermixed_args(argv))
    paths = values.pop("paths")
    if len(paths) not in (2, 3):
        parser.error(f"expected 2 paths (CHECKPOINT OUTPUT_DIR) or 3 (ACTOR_DIR HF_DIR OUTPUT_DIR), got {len(paths)}: "
                     f"{' '.join(paths)}")
    checkpoint, *hf_dir, output_dir = paths
    return Args(checkpoint=checkpoint, output_dir=output_dir, hf_dir=hf_dir[0] if hf_dir else None, **values)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    options = ExportOptions(dtype=args.dtype, lora=args.lora, lora_alpha=args.lora_alpha,
                            base_model=args.base_model or None, max_shard_size=args.max_shard_size,
                            force=args.force, progress=not args.quiet, hf_dir=args.hf_dir)
    try:
        report = export_checkpoint(args.checkpoint, args.output_dir, options)
        if args.verify:
            from utils.fsdp_verify import verify_export

            report.update(verify_export(args.checkpoint, args.output_dir, options))
    except (CheckpointError, FileExistsError, OSError, AssertionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
