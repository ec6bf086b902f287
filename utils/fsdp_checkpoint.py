"""Read verl FSDP checkpoint shards lazily and merge tensors in row blocks, so memory stays far below the model size.

verl writes one `model_world_size_W_rank_R.pt` per rank: DTensors (FSDP2, or FSDP1 with a device mesh) or plain
tensors (a single rank without a mesh). Shards are memory-mapped; a merged tensor is produced block by block from the
ranks' local pieces, placed by each DTensor's mesh coordinate and placements, and the pages a block used are handed back
to the kernel once it is written.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import mmap
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import torch

SHARD_RE = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
TRACKER = "latest_checkpointed_iteration.txt"
BLOCK_BYTES = 16 * 2**20  # source bytes per merged block


class CheckpointError(ValueError):
    """A checkpoint that cannot be exported as it is; the message names the file and the fix."""


@dataclass
class Layout:
    """Where an actor checkpoint's pieces are: the shard files, the HF config folder and the FSDP settings."""

    actor_dir: Path
    world_size: int
    fsdp_version: int | None
    shard_files: list[Path]
    hf_dir: Path
    mapped: list[tuple[int, int]] = field(default_factory=list)  # address ranges of the shard files' mappings


@dataclass
class Region:
    """One rank's piece of a tensor: where it sits in the full tensor and its (memory-mapped) local data."""

    rank: int
    offsets: tuple[int, ...]
    local: torch.Tensor
    mapped: bool = False  # True when `local` lies in a shard file's mapping, so its pages may be released


@dataclass
class Entry:
    """A full tensor of the checkpoint, described by its pieces (nothing is read until it is merged)."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    regions: list[Region] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def resolve_actor_dir(path: str | Path) -> Path:
    """Accept an experiment folder (latest step), a `global_step_N` folder or its `actor/` folder."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise CheckpointError(f"{path} is not a directory; pass an experiment folder, global_step_N or its actor/")
    if any(SHARD_RE.match(p.name) for p in path.iterdir()) or (path / "fsdp_config.json").exists():
        return path
    if (path / "actor").is_dir():
        return resolve_actor_dir(path / "actor")
    tracker = path / TRACKER
    if tracker.is_file():
        step = tracker.read_text().strip()
        if not step.isdigit():
            raise CheckpointError(f"{tracker} should hold a step number, found {step!r}")
        target = path / f"global_step_{step}"
        if not target.is_dir():
            raise CheckpointError(f"{tracker} names step {step}, but {target} does not exist")
        return resolve_actor_dir(target)
    steps = sorted((int(p.name.split("_")[-1]), p) for p in path.glob("global_step_*") if p.name[12:].isdigit())
    if steps:
        return resolve_actor_dir(steps[-1][1])
    raise CheckpointError(f"{path} holds no verl FSDP checkpoint: expected model_world_size_W_rank_R.pt files, an "
                          f"actor/ folder, global_step_N folders or {TRACKER}")


def read_layout(actor_dir: Path, hf_dir: str | Path | None = None) -> Layout:
    """Check the shard set against fsdp_config.json: every rank present, one world size, HF config folder there.

    `hf_dir` replaces `actor/huggingface` as the source of the model config and tokenizer (the reference's form)."""
    found: dict[int, dict[int, Path]] = {}
    for p in actor_dir.iterdir():
        if m := SHARD_RE.match(p.name):
            found.setdefault(int(m.group(1)), {})[int(m.group(2))] = p
    config_path = actor_dir / "fsdp_config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    world = config.get("world_size")
    if world is None:
        if len(found) != 1:
            raise CheckpointError(f"{actor_dir}: no fsdp_config.json and shard files for world sizes "
                                  f"{sorted(found) or 'none'}; cannot tell which set to merge")
        world = next(iter(found))
    if world not in found:
        raise CheckpointError(f"{config_path} says world_size={world}, but {actor_dir} has no "
                              f"model_world_size_{world}_rank_R.pt files (found world sizes {sorted(found)})")
    missing = [f"model_world_size_{world}_rank_{r}.pt" for r in range(world) if r not in found[world]]
    if missing:
        raise CheckpointError(f"{actor_dir} is missing {', '.join(missing)} (world_size={world})")
    if hf_dir is not None:
        hf_dir = Path(hf_dir).expanduser()
        if not (hf_dir / "config.json").is_file():
            raise CheckpointError(f"HF_DIR {hf_dir} has no config.json; pass the folder with the model's config and "
                                  f"tokenizer (verl writes one at global_step_N/actor/huggingface)")
    else:
        hf_dir = actor_dir / "huggingface"
        if not (hf_dir / "config.json").is_file():
            raise CheckpointError(f"{hf_dir / 'config.json'} is missing; verl saves the model config there on rank 0")
    return Layout(actor_dir, world, config.get("FSDP_version"), [found[world][r] for r in range(world)], hf_dir)


def load_shards(layout: Layout) -> list[dict]:
    """Memory-map every rank's model shard (reads no tensor data); a broken file raises naming it."""
    logging.getLogger("torch.distributed.device_mesh").setLevel(logging.ERROR)  # "unpickled before PGs" noise
    shards = []
    for path in layout.shard_files:
        try:
            shards.append(torch.load(path, map_location="cpu", weights_only=False, mmap=True))
        except Exception as err:  # torch raises RuntimeError/EOFError/UnpicklingError for damaged archives
            raise CheckpointError(f"cannot read {path}: {type(err).__name__}: {err}. The file is truncated or "
                                  f"damaged; copy it again from where training wrote it") from err
    layout.mapped = _file_mappings(layout.shard_files)
    return shards


def _file_mappings(paths: list[Path]) -> list[tuple[int, int]]:
    """Address ranges where this process maps `paths` (from /proc/self/maps; empty where that is unavailable)."""
    names = {str(p.resolve()) for p in paths}
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    ranges = []
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5] in names:
            lo, hi = parts[0].split("-")
            ranges.append((int(lo, 16), int(hi, 16)))
    return ranges


def _region(key: str, value, rank: int, world: int, path: Path) -> tuple[tuple[int, ...], Region]:
    """The full shape and this rank's region of one state-dict value (DTensor or plain tensor)."""
    if not hasattr(value, "placements"):
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{path}: entry {key!r} is a {type(value).__name__}, not a tensor")
        return tuple(value.shape), Region(rank, (0,) * value.dim(), value)
    mesh = value.device_mesh.mesh
    if mesh.numel() != world:
        raise CheckpointError(f"{path}: {key!r} was sharded over {mesh.numel()} ranks but the checkpoint has "
                              f"world_size={world}; the shard files come from different runs")
    coord = (mesh == rank).nonzero()
    if len(coord) != 1:
        raise CheckpointError(f"{path}: rank {rank} is not in the device mesh {mesh.tolist()} of {key!r}")
    shape, offsets = list(value.shape), [0] * value.dim()
    for mesh_dim, placement in enumerate(value.placements):
        if placement.is_shard() and type(placement).__name__ == "Shard":
            d, n, c = placement.dim, mesh.shape[mesh_dim], int(coord[0][mesh_dim])
            chunk = math.ceil(shape[d] / n)
            start = min(c * chunk, shape[d])
            offsets[d] += start
            shape[d] = min(shape[d], start + chunk) - start
        elif not placement.is_replicate():
            raise CheckpointError(f"{path}: {key!r} has placement {placement}; only Shard and Replicate "
                                  f"(FSDP, HSDP) can be merged, not tensor-parallel or partial layouts")
    local = value._local_tensor
    if list(local.shape) != shape:
        raise CheckpointError(f"{path}: {key!r} local shape {tuple(local.shape)} does not match {tuple(shape)} "
                              f"expected from its placements {value.placements}")
    return tuple(value.shape), Region(rank, tuple(offsets), local)


def plan_entries(layout: Layout, shards: list[dict]) -> dict[str, Entry]:
    """Describe every full tensor by its unique pieces, checking that the ranks agree and the pieces tile it."""
    keys = list(shards[0])
    entries: dict[str, Entry] = {}
    for rank, (shard, path) in enumerate(zip(shards, layout.shard_files)):
        if set(shard) != set(keys):
            diff = sorted(set(shard) ^ set(keys))[:5]
            raise CheckpointError(f"{path} holds other keys than {layout.shard_files[0].name} (e.g. {diff})")
        for key in keys:
            shape, region = _region(key, shard[key], rank, layout.world_size, path)
            entry = entries.setdefault(key, Entry(key, shape, shard[key].dtype))
            if (shape, shard[key].dtype) != (entry.shape, entry.dtype):
                raise CheckpointError(f"{path}: {key!r} is {shape} {shard[key].dtype} here but "
                                      f"{entry.shape} {entry.dtype} on rank 0")
            if all(r.offsets != region.offsets or r.local.shape != region.local.shape for r in entry.regions):
                region.mapped = _inside(region.local, layout.mapped)
                entry.regions.append(region)
    for entry in entries.values():
        covered = sum(r.local.numel() for r in entry.regions)
        if covered != math.prod(entry.shape):
            raise CheckpointError(f"{layout.actor_dir}: pieces of {entry.key!r} cover {covered} of "
                                  f"{math.prod(entry.shape)} elements; the shard set is inconsistent")
    return entries


def aliases(entries: dict[str, Entry]) -> dict[str, str]:
    """Keys whose data is the same storage as an earlier key (tied weights): {alias: canonical}."""
    seen: dict[tuple, str] = {}
    found = {}
    for key, entry in entries.items():
        ident = tuple((r.local.data_ptr(), tuple(r.local.shape), r.local.stride()) for r in entry.regions)
        if ident in seen and entry.shape == entries[seen[ident]].shape:
            found[key] = seen[ident]
        else:
            seen.setdefault(ident, key)
    return found


def same_values(a: Entry, b: Entry) -> bool:
    """Whether two entries hold the same shape, dtype and values, bit for bit (streamed block by block)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.shape:
        return torch.equal(a.regions[0].local, b.regions[0].local)
    others, pending = iter_blocks(b), None
    for block in iter_blocks(a):
        while pending is None or len(pending) < len(block):
            following = next(others)
            pending = following if pending is None else torch.cat([pending, following])
        if not torch.equal(block, pending[:len(block)]):
            return False
        pending = pending[len(block):]
    return True


def _row_blocks(entry: Entry, step: int) -> list[tuple[int, int]]:
    """Row ranges of at most `step` rows that never straddle a piece boundary (so Shard(0) pieces need no copy)."""
    cuts = sorted({0, entry.shape[0]} | {r.offsets[0] for r in entry.regions} |
                  {r.offsets[0] + r.local.shape[0] for r in entry.regions})
    return [(a, min(b, a + step)) for lo, b in zip(cuts, cuts[1:]) for a in range(lo, b, step)]


def iter_blocks(entry: Entry, dtype: torch.dtype | None = None, block_bytes: int = BLOCK_BYTES,
                release: bool = True) -> Iterator[torch.Tensor]:
    """Yield the merged tensor as consecutive row blocks (dim 0) in `dtype`; pages are released after each block."""
    dtype = dtype or entry.dtype
    if len(entry.shape) == 0:
        yield entry.regions[0].local.to(dtype)
        return
    row_bytes = max(1, math.prod(entry.shape[1:]) * entry.dtype.itemsize)
    for start, stop in _row_blocks(entry, max(1, block_bytes // row_bytes)):
        parts = [(r, max(start, r.offsets[0]), min(stop, r.offsets[0] + r.local.shape[0])) for r in entry.regions]
        parts = [(r, a, b) for r, a, b in parts if a < b]
        if len(parts) == 1 and tuple(parts[0][0].local.shape[1:]) == entry.shape[1:]:
            r = parts[0][0]
            yield r.local[start - r.offsets[0]:stop - r.offsets[0]].to(dtype)
        else:
            block = torch.empty((stop - start, *entry.shape[1:]), dtype=dtype)
            for r, a, b in parts:
                index = [slice(a - start, b - start)]
                index += [slice(o, o + n) for o, n in zip(r.offsets[1:], r.local.shape[1:])]
                block[tuple(index)].copy_(r.local[a - r.offsets[0]:b - r.offsets[0]])
            yield block
        if release:
            for r, a, b in parts:
                if r.mapped:
                    release_pages(r.local[a - r.offsets[0]:b - r.offsets[0]])


def merge_entry(entry: Entry, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The whole merged tensor in memory (for small tensors such as LoRA factors, and for tests)."""
    blocks = list(iter_blocks(entry, dtype, release=False))
    return blocks[0] if len(entry.shape) == 0 else torch.cat(blocks, dim=0)


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _inside(tensor: torch.Tensor, ranges: list[tuple[int, int]]) -> bool:
    """True if the tensor's bytes lie inside one of the mapped address ranges."""
    lo = tensor.data_ptr()
    hi = lo + tensor.numel() * tensor.element_size()
    return tensor.is_contiguous() and any(a <= lo and hi <= b for a, b in ranges)


def release_pages(tensor: torch.Tensor) -> None:
    """Tell the kernel we are done with a memory-mapped tensor's pages (drops them from our RSS; Linux only).

    Only for tensors inside a read-only-used file mapping (`Region.mapped`): a later access reads the file again.
    On anonymous memory MADV_DONTNEED would zero data, which is why callers check `Region.mapped` first.
    """
    if _LIBC is None or tensor.numel() == 0 or not tensor.is_contiguous():
        return
    page = mmap.PAGESIZE
    start = tensor.data_ptr() // page * page
    end = tensor.data_ptr() + tensor.numel() * tensor.element_size()
    _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), 4)  # MADV_DONTNEED
