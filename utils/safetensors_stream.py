"""Write sharded safetensors files tensor by tensor, block by block, without holding a shard in memory.

`safetensors.torch.save_file` needs every tensor of a file in memory at once. The format only needs the header
(names, dtypes, shapes, offsets) up front, so we write the header from the plan and then stream each tensor's bytes
in order. Files follow Hugging Face naming (`model.safetensors` or `model-0000i-of-0000n.safetensors` plus
`model.safetensors.index.json`).
"""

from __future__ import annotations

import json
import math
import mmap
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

DTYPE_CODES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
    torch.bool: "BOOL", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
}
INDEX_NAME = "model.safetensors.index.json"
CODE_DTYPES = {code: dtype for dtype, code in DTYPE_CODES.items()}


@dataclass(frozen=True)
class TensorSpec:
    """A tensor to be written: its name in the file, full shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def parse_size(text: str | int) -> int:
    """'2GB' / '500MB' / '1GiB' / 123 -> bytes (HF's max_shard_size spelling)."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?)B?\s*", text.upper())
    if not m:
        raise ValueError(f"max shard size {text!r}: write it like '2GB', '500MB' or a number of bytes")
    base = 1024 if m.group(3) else 1000
    return int(float(m.group(1)) * base ** " KMGT".index(m.group(2) or " "))


def plan_files(specs: list[TensorSpec], max_bytes: int, stem: str = "model") -> dict[str, list[TensorSpec]]:
    """Split tensors, in order, into files of at most `max_bytes` (a larger tensor gets a file of its own)."""
    groups: list[list[TensorSpec]] = [[]]
    size = 0
    for spec in specs:
        if groups[-1] and size + spec.nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(spec)
        size += spec.nbytes
    if len(groups) == 1:
        return {f"{stem}.safetensors": groups[0]}
    n = len(groups)
    return {f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors": g for i, g in enumerate(groups)}


def header_bytes(specs: list[TensorSpec], metadata: dict[str, str] | None = None) -> bytes:
    """The length prefix and JSON header of a safetensors file holding `specs` in this order."""
    header: dict = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for spec in specs:
        if spec.dtype not in DTYPE_CODES:
            raise ValueError(f"tensor {spec.name!r} has dtype {spec.dtype}, which safetensors cannot store")
        header[spec.name] = {"dtype": DTYPE_CODES[spec.dtype], "shape": list(spec.shape),
                             "data_offsets": [offset, offset + spec.nbytes]}
        offset += spec.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
    return len(raw).to_bytes(8, "little") + raw


class StreamWriter:
    """Write one safetensors file: the header at once, then each tensor's blocks in plan order.

    Checks that every tensor gets exactly its declared bytes, so a bug cannot produce a silently short file.
    """

    def __init__(self, path: Path, specs: list[TensorSpec]):
        self.path, self.specs = Path(path), list(specs)
        self._file: BinaryIO = open(self.path, "wb")
        self._file.write(header_bytes(self.specs))
        self._index, self._written = 0, 0

    def write(self, name: str, block: torch.Tensor) -> None:
        """Append a block (rows of the current tensor, already in its dtype)."""
        spec = self.specs[self._index]
        if name != spec.name or block.dtype != spec.dtype:
            raise RuntimeError(f"{self.path}: got {name!r} {block.dtype}, expected {spec.name!r} {spec.dtype}")
        data = block.detach().contiguous().reshape(-1).view(torch.uint8).numpy()
        self._file.write(memoryview(data))
        self._written += data.nbytes
        if self._written > spec.nbytes:
            raise RuntimeError(f"{self.path}: {name!r} got {self._written} bytes, more than its {spec.nbytes}")
        if self._written == spec.nbytes:
            self._index, self._written = self._index + 1, 0

    def close(self) -> None:
        """Flush to disk; raise if a tensor is incomplete."""
        self._file.flush()
        self._file.close()
        if self._index < len(self.specs):
            raise RuntimeError(f"{self.path}: {self.specs[self._index].name!r} and later tensors were not written")


def write_index(out_dir: Path, files: dict[str, list[TensorSpec]]) -> None:
    """Write model.safetensors.index.json when the weights span several files."""
    if len(files) < 2:
        return
    weight_map = {spec.name: name for name, specs in files.items() for spec in specs}
    total = sum(spec.nbytes for specs in files.values() for spec in specs)
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (Path(out_dir) / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")


def map_safetensors(folder: str | Path) -> dict[str, torch.Tensor]:
    """Every tensor of the *.safetensors files in `folder` as a view into a private file mapping (reads no data)."""
    tensors = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with open(path, "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        size = int.from_bytes(mapped[:8], "little")
        header = json.loads(mapped[8:8 + size])
        raw = torch.frombuffer(mapped, dtype=torch.uint8)
        for name, info in header.items():
            if name == "__metadata__":
                continue
            start, end = (8 + size + o for o in info["data_offsets"])
            dtype = CODE_DTYPES[info["dtype"]]
            data = raw[start:end] if start % dtype.itemsize == 0 else raw[start:end].clone()
            tensors[name] = data.view(dtype).reshape(info["shape"])
    if not tensors:
        raise FileNotFoundError(f"{folder} holds no *.safetensors files")
    return tensors
