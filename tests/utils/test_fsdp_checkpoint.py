"""Shard reading and merging: directory resolution, layout checks, placements, streamed blocks, safetensors writer."""

import json
import math

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from utils.fsdp_checkpoint import (
    CheckpointError,
    Entry,
    Region,
    iter_blocks,
    merge_entry,
    read_layout,
    release_pages,
    resolve_actor_dir,
)
from utils.safetensors_stream import StreamWriter, TensorSpec, map_safetensors, parse_size, plan_files, write_index


def fake_actor(root, world=2, config=True, hf=True, ranks=None):
    actor = root / "global_step_3" / "actor"
    actor.mkdir(parents=True)
    for r in range(world) if ranks is None else ranks:
        torch.save({"w": torch.zeros(2)}, actor / f"model_world_size_{world}_rank_{r}.pt")
    if config:
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    if hf:
        (actor / "huggingface").mkdir()
        (actor / "huggingface" / "config.json").write_text("{}")
    return actor


def test_resolve_accepts_experiment_step_and_actor(tmp_path):
    actor = fake_actor(tmp_path)
    assert resolve_actor_dir(actor) == actor
    assert resolve_actor_dir(actor.parent) == actor
    assert resolve_actor_dir(tmp_path) == actor  # no tracker: highest global_step_N
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    with pytest.raises(CheckpointError, match="global_step_7"):
        resolve_actor_dir(tmp_path)
    with pytest.raises(CheckpointError, match="holds no verl FSDP checkpoint"):
        resolve_actor_dir(actor / "huggingface")
    with pytest.raises(CheckpointError, match="not a directory"):
        resolve_actor_dir(tmp_path / "nope")


def test_layout_errors_name_the_file(tmp_path):
    actor = fake_actor(tmp_path / "a", world=2, ranks=[0])
    with pytest.raises(CheckpointError, match="model_world_size_2_rank_1.pt"):
        read_layout(actor)
    actor = fake_actor(tmp_path / "b", world=2)
    (actor / "fsdp_config.json").write_text(json.dumps({"world_size": 4}))
    with pytest.raises(CheckpointError, match="world_size=4"):
        read_layout(actor)
    actor = fake_actor(tmp_path / "c", world=1, hf=False)
    with pytest.raises(CheckpointError, match="huggingface/config.json"):
        read_layout(actor)
    layout = read_layout(fake_actor(tmp_path / "d", world=2, config=False))
    assert layout.world_size == 2 and [p.name for p in layout.shard_files] == [
        "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt"]


def _entry(full, pieces):
    """An Entry from a full tensor cut into (offsets, sizes) pieces."""
    regions = []
    for rank, (offsets, sizes) in enumerate(pieces):
        index = tuple(slice(o, o + s) for o, s in zip(offsets, sizes))
        regions.append(Region(rank, offsets, full[index].clone()))
    return Entry("t", tuple(full.shape), full.dtype, regions)


@pytest.mark.parametrize("block_bytes", [8, 40, 10**6])
def test_blocks_reassemble_any_layout(block_bytes):
    full = torch.randn(7, 5)
    row_split = _entry(full, [((0, 0), (4, 5)), ((4, 0), (3, 5))])  # Shard(0), uneven like torch.chunk
    col_split = _entry(full, [((0, 0), (7, 3)), ((0, 3), (7, 2))])  # Shard(1)
    grid = _entry(full, [((0, 0), (4, 3)), ((0, 3), (4, 2)), ((4, 0), (3, 3)), ((4, 3), (3, 2))])  # 2-D mesh
    for entry in (row_split, col_split, grid):
        blocks = list(iter_blocks(entry, torch.bfloat16, block_bytes=block_bytes, release=False))
        assert torch.equal(torch.cat(blocks), full.bfloat16())
        assert torch.equal(merge_entry(entry), full)


def test_release_pages_keeps_mapped_data(tmp_path):
    path = tmp_path / "x.pt"
    torch.save({"x": torch.arange(1 << 20, dtype=torch.float32)}, path)
    x = torch.load(path, mmap=True)["x"]
    total = float(x.sum())
    release_pages(x)
    assert float(x.sum()) == total  # pages come back from the file


def test_parse_size_and_file_plan():
    assert parse_size("2GB") == 2 * 10**9 and parse_size("1GiB") == 2**30 and parse_size(5) == 5
    with pytest.raises(ValueError, match="2GB"):
        parse_size("two")
    specs = [TensorSpec(f"t{i}", (10,), torch.float32) for i in range(5)]  # 40 bytes each
    assert list(plan_files(specs, 1000)) == ["model.safetensors"]
    files = plan_files(specs, 100)
    assert list(files) == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    assert [len(v) for v in files.values()] == [2, 2, 1]


def test_stream_writer_matches_safetensors(tmp_path):
    tensors = {"a": torch.randn(5, 3).bfloat16(), "b": torch.arange(6, dtype=torch.int64), "c": torch.tensor(2.5)}
    specs = [TensorSpec(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]
    files = plan_files(specs, 40)
    for name, file_specs in files.items():
        writer = StreamWriter(tmp_path / name, file_specs)
        for spec in file_specs:
            t = tensors[spec.name]
            for block in (t.split(2) if t.dim() else [t]):
                writer.write(spec.name, block)
        writer.close()
    write_index(tmp_path, files)
    loaded = {}
    for name in files:
        loaded.update(load_file(tmp_path / name))
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(tensors)
    assert index["metadata"]["total_size"] == sum(math.prod(s.shape) * s.dtype.itemsize for s in specs)
    with safe_open(tmp_path / list(files)[0], framework="pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_stream_writer_refuses_short_or_wrong_data(tmp_path):
    writer = StreamWriter(tmp_path / "x.safetensors", [TensorSpec("a", (4,), torch.float32)])
    with pytest.raises(RuntimeError, match="expected 'a'"):
        writer.write("b", torch.zeros(4))
    writer.write("a", torch.zeros(2))
    with pytest.raises(RuntimeError, match="not written"):
        writer.close()


def test_map_safetensors_reads_lazily_and_handles_odd_offsets(tmp_path):
    tensors = {"a": torch.arange(3, dtype=torch.uint8), "b": torch.randn(4, 2), "c": torch.randn(3).bfloat16()}
    specs = [TensorSpec(k, tuple(v.shape), v.dtype) for k, v in tensors.items()]  # "b" starts at an odd offset
    writer = StreamWriter(tmp_path / "model.safetensors", specs)
    for k, v in tensors.items():
        writer.write(k, v)
    writer.close()
    mapped = map_safetensors(tmp_path)
    assert all(torch.equal(mapped[k], v) for k, v in tensors.items())
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        map_safetensors(tmp_path / "nothing")
