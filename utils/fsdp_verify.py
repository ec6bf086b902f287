"""Check an exported folder against its FSDP checkpoint: every tensor bit for bit, names, shapes, tokenizer.

The comparison streams both sides (row blocks from the memory-mapped shards, row slices from the safetensors files),
so verifying costs no more memory than exporting. The model class is instantiated on the meta device to check that the
files hold exactly the parameters transformers expects, and the tokenizer is loaded as a user would.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from utils.fsdp_checkpoint import load_shards, plan_entries, read_layout, resolve_actor_dir
from utils.fsdp_export import ExportOptions, Output, plan_outputs, stream_output, target_dtype
from utils.safetensors_stream import INDEX_NAME


class VerifyError(AssertionError):
    """The exported folder differs from the checkpoint; the message names the tensor or file."""


def _weight_map(folder: Path, stem: str) -> dict[str, Path]:
    index = folder / f"{stem}.safetensors.index.json" if stem != "model" else folder / INDEX_NAME
    if index.is_file():
        return {k: folder / v for k, v in json.loads(index.read_text())["weight_map"].items()}
    single = folder / f"{stem}.safetensors"
    if not single.is_file():
        raise VerifyError(f"{folder} has neither {single.name} nor {index.name}")
    with safe_open(single, framework="pt") as f:
        return {k: single for k in f.keys()}


def compare_tensors(folder: Path, outputs: list[Output], options: ExportOptions, stem: str = "model") -> int:
    """Compare every output tensor with the file's copy, block by block; returns the number checked."""
    files = _weight_map(folder, stem)
    extra = set(files) - {o.name for o in outputs}
    if extra:
        raise VerifyError(f"{folder}: unexpected tensors {sorted(extra)[:5]}")
    for out in outputs:
        if out.name not in files:
            raise VerifyError(f"{folder}: tensor {out.name!r} is missing")
        dtype = target_dtype(out.entry, options)
        with safe_open(files[out.name], framework="pt") as f:
            stored = f.get_slice(out.name)
            if tuple(stored.get_shape()) != out.entry.shape:
                raise VerifyError(f"{files[out.name]}: {out.name!r} has shape {stored.get_shape()}, "
                                  f"expected {out.entry.shape}")
            row = 0
            for block in stream_output(out, dtype):
                n = len(block) if block.dim() else 1
                saved = stored[row:row + n] if block.dim() else stored[:]
                if saved.dtype != dtype or not torch.equal(saved.reshape(block.shape), block):
                    raise VerifyError(f"{files[out.name]}: {out.name!r} rows {row}..{row + n} differ from "
                                      f"the checkpoint (dtype {saved.dtype}, expected {dtype})")
                row += n
    return len(outputs)


def check_loadable(folder: Path, names: set[str]) -> None:
    """transformers builds the model class (meta device) with exactly these parameters and loads the tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    if any("ForCausalLM" in a for a in config.architectures or []):
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
        expected = {k for k, _ in model.named_parameters()}
        expected |= {k for k, _ in model.named_buffers() if k in model.state_dict()}
        missing, unexpected = expected - names, names - expected
        if missing or unexpected:
            raise VerifyError(f"{folder}: transformers expects other weights: missing {sorted(missing)[:5]}, "
                              f"unexpected {sorted(unexpected)[:5]}")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    if (folder / "chat_template.jinja").exists() and not tokenizer.chat_template:
        raise VerifyError(f"{folder}: the tokenizer lost its chat template")


def verify_export(checkpoint: str | Path, folder: str | Path, options: ExportOptions | None = None) -> dict:
    """Re-read the checkpoint and the exported folder and compare them; raises VerifyError on any difference."""
    options, folder = options or ExportOptions(), Path(folder)
    layout = read_layout(resolve_actor_dir(checkpoint), options.hf_dir)
    entries = plan_entries(layout, load_shards(layout))
    config = json.loads((layout.hf_dir / "config.json").read_text())
    model, adapter = plan_outputs(layout, entries, config, options)
    checked = compare_tensors(folder, model, options)
    if adapter:
        checked += compare_tensors(folder / "lora_adapter", adapter, options, stem="adapter_model")
    check_loadable(folder, {o.name for o in model})
    return {"verified_tensors": checked}
