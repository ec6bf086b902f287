"""Export a verl FSDP checkpoint to a Hugging Face model folder, streaming tensors from the shards to the files.

Used by `utils/load_fsdp_to_hf.py`. The output (sharded safetensors, config with the chosen dtype, tokenizer, chat
template, generation config) is written into a temporary sibling folder and renamed into place only when complete.
Tied embeddings are written once; LoRA factors are merged into their base weights (W + alpha/r * B @ A) or, on request,
written as a peft adapter in `OUTPUT/lora_adapter` next to the base model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import torch
from tqdm import tqdm

from utils.fsdp_checkpoint import (
    CheckpointError,
    Entry,
    Layout,
    Region,
    aliases,
    iter_blocks,
    load_shards,
    merge_entry,
    plan_entries,
    read_layout,
    resolve_actor_dir,
    same_values,
)
from utils.safetensors_stream import StreamWriter, TensorSpec, map_safetensors, parse_size, plan_files, write_index

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "auto": None}
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}
WRAPPERS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")
PEFT_PREFIX = "base_model.model."
LORA_RE = re.compile(r"^(.*)\.lora_([AB])(?:\.default)?\.weight$")
UNSUPPORTED = ("lora_embedding_", "lora_magnitude_vector", "modules_to_save", "original_module")
SKIP_FILES = re.compile(r".*\.(safetensors|bin|pt|pth)$|.*\.index\.json$|^config\.json$")


@dataclass
class ExportOptions:
    """How to export: keys mirror the CLI flags of utils/load_fsdp_to_hf.py."""

    dtype: str = "bf16"  # bf16 | fp16 | fp32 | auto (keep the shards' dtype)
    lora: str = "merge"  # merge: LoRA folded into the weights; adapter: base model + OUTPUT/lora_adapter
    lora_alpha: float | None = None  # only when the checkpoint lacks lora_train_meta.json
    base_model: str | None = None  # HF folder with the base weights, for LoRA-only checkpoints (save_lora_only)
    max_shard_size: str = "2GB"  # per safetensors file
    force: bool = False  # replace an existing output folder
    progress: bool = True  # show a progress bar
    hf_dir: str | None = None  # model config + tokenizer folder instead of actor/huggingface (three-argument form)


@dataclass
class Output:
    """One tensor of the exported model: its name, its source entry and an optional LoRA update (A, B, scale)."""

    name: str
    entry: Entry
    lora: tuple[Entry, Entry, float] | None = None


def clean_key(key: str) -> str:
    """Checkpoint key -> HF key: drop FSDP/checkpointing/compile wrappers, the peft prefix and `.base_layer`."""
    for part in WRAPPERS:
        key = key.replace(part, "")
    if key.startswith(PEFT_PREFIX):
        key = key[len(PEFT_PREFIX):]
    return key.replace(".base_layer.", ".")


def lora_scale(layout: Layout, rank: int, options: ExportOptions) -> float:
    """alpha / r from verl's lora_train_meta.json (or --lora-alpha)."""
    meta_path = layout.actor_dir / "lora_train_meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    alpha = options.lora_alpha if options.lora_alpha is not None else meta.get("lora_alpha")
    if alpha is None:
        raise CheckpointError(f"{meta_path} is missing, so LoRA alpha is unknown: pass --lora-alpha")
    return float(alpha) / int(meta.get("r") or rank)


def declared_ties(hf_dir: Path) -> dict[str, str]:
    """{alias: canonical} of the parameters transformers ties for this config (lm_head.weight ->
    model.embed_tokens.weight), read from the model class built on the meta device; {} when transformers cannot
    build it (the exported folder's check then names any tensor left over)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(hf_dir))
    except (ValueError, OSError, KeyError, ImportError):
        return {}
    first, ties = {}, {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first:
            ties[name] = first[id(param)]
        else:
            first[id(param)] = name
    return ties


def tied_aliases(layout: Layout, entries: dict[str, Entry], config: dict) -> dict[str, str]:
    """Checkpoint keys that a tied model stores once: {alias key: canonical key}.

    A CPU run's shards hold a tied pair as one storage (`aliases`). A CUDA run's do not: verl copies each tensor to
    the CPU on its own when it saves (ShardedStateDictConfig(offload_to_cpu=True)), so lm_head.weight arrives as a
    second, equal copy (H100, 2026-11-26: the export's check found it left over). The pairs transformers ties are
    then compared value for value; a pair that differs is an error, never a silent choice of one copy."""
    if not config.get("tie_word_embeddings"):
        return {}
    found = aliases(entries)
    keys = {clean_key(key): key for key in entries}
    for alias, canonical in declared_ties(layout.hf_dir).items():
        alias_key, canonical_key = keys.get(alias), keys.get(canonical)
        if alias_key is None or canonical_key is None or alias_key in found:
            continue
        if not same_values(entries[alias_key], entries[canonical_key]):
            raise CheckpointError(f"{layout.actor_dir}: config.json ties {alias!r} to {canonical!r} "
                                  "(tie_word_embeddings) but the checkpoint holds different values for them")
        found[alias_key] = canonical_key
    return found


def plan_outputs(layout: Layout, entries: dict[str, Entry], config: dict,
                 options: ExportOptions) -> tuple[list[Output], list[Output]]:
    """The model tensors and (adapter mode) adapter tensors to write, with tied aliases dropped."""
    tied = tied_aliases(layout, entries, config)
    factors: dict[str, dict[str, Entry]] = {}
    model: dict[str, Output] = {}
    for key, entry in entries.items():
        if any(part in key for part in UNSUPPORTED):
            raise CheckpointError(f"{layout.actor_dir}: {key!r} is a peft feature this exporter does not handle")
        name = clean_key(key)
        if m := LORA_RE.match(name):
            factors.setdefault(m.group(1), {})[m.group(2)] = entry
        elif key not in tied:
            if name in model:
                raise CheckpointError(f"{layout.actor_dir}: keys {model[name].entry.key!r} and {key!r} both map "
                                      f"to {name!r}")
            model[name] = Output(name, entry)
    if factors and not model:
        model = base_outputs(layout, options)
    adapter = []
    for module, ab in sorted(factors.items()):
        if set(ab) != {"A", "B"} or f"{module}.weight" not in model:
            raise CheckpointError(f"{layout.actor_dir}: LoRA on {module!r} lacks lora_A, lora_B or a base weight")
        if options.lora == "adapter":
            adapter += [Output(f"{PEFT_PREFIX}{module}.lora_{x}.weight", ab[x]) for x in "AB"]
        else:
            model[f"{module}.weight"].lora = (ab["A"], ab["B"], lora_scale(layout, ab["A"].shape[0], options))
    return list(model.values()), adapter


def base_outputs(layout: Layout, options: ExportOptions) -> dict[str, Output]:
    """Base weights of a LoRA-only checkpoint, memory-mapped from the --base-model folder's safetensors."""
    if not options.base_model:
        raise CheckpointError(f"{layout.actor_dir} holds only LoRA weights (actor.checkpoint.save_lora_only): "
                              f"pass --base-model with the HF folder training started from")
    tensors = map_safetensors(options.base_model)
    return {name: Output(name, Entry(name, tuple(t.shape), t.dtype, [Region(0, (0,) * t.dim(), t)]))
            for name, t in tensors.items()}


def target_dtype(entry: Entry, options: ExportOptions) -> torch.dtype:
    """The output dtype of one tensor: the chosen one for floats, the source one for integers and `auto`."""
    wanted = DTYPES[options.dtype]
    return wanted if wanted is not None and entry.dtype.is_floating_point else entry.dtype


def _spec(out: Output, options: ExportOptions) -> TensorSpec:
    return TensorSpec(out.name, out.entry.shape, target_dtype(out.entry, options))


def stream_output(out: Output, dtype: torch.dtype) -> Iterator[torch.Tensor]:
    """Merged row blocks of one output tensor in `dtype`; a LoRA update is added in (at least) fp32."""
    lora = None
    if out.lora:
        a, b, scale = out.lora
        work = torch.promote_types(out.entry.dtype, torch.float32)
        lora = (merge_entry(a, work), merge_entry(b, work), scale)
    row, exact = 0, lora is None and dtype != torch.float16  # else convert after the update / range check
    for block in iter_blocks(out.entry, dtype if exact else None):
        if lora:
            a, b, scale = lora
            block = block.to(a.dtype) + (b[row:row + len(block)] @ a) * scale
        row += len(block) if block.dim() else 1
        converted = block.to(dtype)
        if dtype == torch.float16 and torch.isinf(converted).any() and not torch.isinf(block).any():
            raise CheckpointError(f"{out.entry.key!r} has values beyond float16's range; export with --dtype bf16")
        yield converted


def write_weights(folder: Path, outputs: list[Output], options: ExportOptions, stem: str = "model",
                  bar: tqdm | None = None) -> dict[str, list[TensorSpec]]:
    """Stream `outputs` into sharded safetensors files in `folder`; returns the file plan."""
    specs = [_spec(o, options) for o in outputs]
    files = plan_files(specs, parse_size(options.max_shard_size), stem)
    by_name = {o.name: o for o in outputs}
    for filename, file_specs in files.items():
        writer = StreamWriter(folder / filename, file_specs)
        for spec in file_specs:
            for block in stream_output(by_name[spec.name], spec.dtype):
                writer.write(spec.name, block)
                bar and bar.update(block.numel() * block.element_size())
            if spec.nbytes == 0:
                writer.write(spec.name, torch.empty(spec.shape, dtype=spec.dtype))
        writer.close()
    if stem == "model":
        write_index(folder, files)
    return files


def write_metadata(layout: Layout, folder: Path, config: dict, dtype: torch.dtype | None) -> None:
    """config.json with the output dtype, plus every tokenizer/template/generation file of actor/huggingface."""
    config = dict(config)
    if dtype is not None:
        config["dtype"] = DTYPE_NAMES[dtype]
        if "torch_dtype" in config:
            config["torch_dtype"] = DTYPE_NAMES[dtype]
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for src in layout.hf_dir.iterdir():
        if src.is_file() and not SKIP_FILES.match(src.name):
            shutil.copy2(src, folder / src.name)
    if not (folder / "generation_config.json").exists():
        ids = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if config.get(k) is not None}
        (folder / "generation_config.json").write_text(json.dumps({**ids, "_from_model_config": True}, indent=2))


def write_adapter(folder: Path, adapter: list[Output], layout: Layout, options: ExportOptions,
                  bar: tqdm | None = None) -> None:
    """A peft LoRA adapter (adapter_config.json + adapter_model.safetensors) in `folder`."""
    folder.mkdir()
    write_weights(folder, adapter, replace(options, max_shard_size="1000TB"), stem="adapter_model", bar=bar)
    meta_path = layout.actor_dir / "lora_train_meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    rank = adapter[0].entry.shape[0]
    targets = sorted({o.name.split(".")[-3] for o in adapter})
    config = {"peft_type": "LORA", "task_type": meta.get("task_type", "CAUSAL_LM"), "r": meta.get("r", rank),
              "lora_alpha": options.lora_alpha or meta.get("lora_alpha", rank), "target_modules": targets,
              "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
              "inference_mode": True, "base_model_name_or_path": None}
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def _check_output(output: Path, force: bool, needed: int) -> None:
    """Refuse to clobber an existing output without force, and to start when the disk cannot hold the result."""
    if output.exists() and (not output.is_dir() or any(output.iterdir())) and not force:
        raise FileExistsError(f"{output} already exists; pass --force to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(output.parent).free
    if free < needed * 1.02:
        raise OSError(f"{output.parent} has {free / 1e9:.2f} GB free; the export needs {needed / 1e9:.2f} GB")


def _check_not_inside(output: Path, sources: list[Path]) -> None:
    """The export never writes into the folders it reads: refuse an OUTPUT equal to or inside one of them."""
    for source in sources:
        source = source.expanduser().resolve()
        if output.resolve() == source or source in output.resolve().parents:
            raise CheckpointError(f"OUTPUT {output} lies inside {source}, which the export reads from and never "
                                  f"writes into; choose an output folder outside it (e.g. exported/<name>)")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _move_into_place(tmp: Path, output: Path) -> None:
    """Rename the finished temporary folder to `output`, replacing an old one only after the new one is complete."""
    old = None
    if output.exists():
        old = output.with_name(f".{output.name}.old-{os.getpid()}")
        os.replace(output, old)
    os.replace(tmp, output)
    if old is not None:
        shutil.rmtree(old) if old.is_dir() else old.unlink()


def export_checkpoint(checkpoint: str | Path, output: str | Path, options: ExportOptions | None = None) -> dict:
    """Export `checkpoint` (experiment folder, global_step_N or actor/) to the HF folder `output`; returns a report."""
    options = options or ExportOptions()
    if options.dtype not in DTYPES or options.lora not in ("merge", "adapter"):
        raise ValueError(f"dtype must be one of {list(DTYPES)} and lora 'merge' or 'adapter'; got {options}")
    start, output = time.perf_counter(), Path(output).expanduser().absolute()
    layout = read_layout(resolve_actor_dir(checkpoint), options.hf_dir)
    _check_not_inside(output, [layout.actor_dir, layout.hf_dir])
    entries = plan_entries(layout, load_shards(layout))
    config = json.loads((layout.hf_dir / "config.json").read_text())
    model, adapter = plan_outputs(layout, entries, config, options)
    total = sum(_spec(o, options).nbytes for o in model + adapter)
    _check_output(output, options.force, total)
    tmp = Path(tempfile.mkdtemp(prefix=f".{output.name}.tmp-", dir=output.parent))
    os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it private; the final folder should look like any other
    try:
        with tqdm(total=total, unit="B", unit_scale=True, desc="export", disable=not options.progress) as bar:
            files = write_weights(tmp, model, options, bar=bar)
            if adapter:
                write_adapter(tmp / "lora_adapter", adapter, layout, options, bar)
        write_metadata(layout, tmp, config, DTYPES[options.dtype] or model[0].entry.dtype)
        _move_into_place(tmp, output)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"checkpoint": str(layout.actor_dir), "output": str(output), "world_size": layout.world_size,
            "fsdp_version": layout.fsdp_version, "tensors": len(model), "adapter_tensors": len(adapter),
            "files": list(files), "bytes": total, "seconds": round(time.perf_counter() - start, 2)}
