"""A tier's files as one tar cut into numbered parts, each in its own folder with the tier's manifest (sizes and
SHA-256 of every part, of the whole tar and of every file), and the way back. Stdlib only: it runs on the target.

    dist/core-01/core.tar.part01  dist/core-01/MANIFEST.json
    dist/core-02/core.tar.part02  dist/core-02/MANIFEST.json   ...

One folder per part, so a transfer that takes a few paths a time names one folder per part. The tar is written
deterministically (sorted names, zero times and owners): the same files give the same parts and sums.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = 1
MANIFEST = "MANIFEST.json"
READ = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(READ), b""):
            digest.update(block)
    return digest.hexdigest()


def part_folder(tier: str, index: int) -> str:
    return f"{tier}-{index:02d}"


def part_file(tier: str, index: int) -> str:
    return f"{tier}.tar.part{index:02d}"


class _PartWriter(io.RawIOBase):
    """A write-only stream that cuts what it is given into files of `part_bytes`, hashing each and the whole."""

    def __init__(self, dist: Path, tier: str, part_bytes: int):
        self.dist, self.tier, self.part_bytes = dist, tier, part_bytes
        self.parts: list[dict] = []
        self.total = hashlib.sha256()
        self.size = 0
        self._handle = None
        self._digest = None
        self._filled = 0

    def writable(self) -> bool:
        return True

    def _next_part(self) -> None:
        self._close_part()
        index = len(self.parts) + 1
        folder = self.dist / part_folder(self.tier, index)
        folder.mkdir(parents=True)
        self.parts.append({"folder": folder.name, "file": part_file(self.tier, index)})
        self._handle = open(folder / self.parts[-1]["file"], "wb")
        self._digest, self._filled = hashlib.sha256(), 0

    def _close_part(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self.parts[-1].update(bytes=self._filled, sha256=self._digest.hexdigest())
            self._handle = None

    def write(self, data) -> int:
        view = memoryview(data)
        self.total.update(view)
        self.size += len(view)
        while len(view):
            if self._handle is None or self._filled == self.part_bytes:
                self._next_part()
            take = min(len(view), self.part_bytes - self._filled)
            self._handle.write(view[:take])
            self._digest.update(view[:take])
            self._filled += take
            view = view[take:]
        return len(data)

    def finish(self) -> list[dict]:
        self._close_part()
        return self.parts


def pack(files: list[Path], tier: str, dist: Path, part_bytes: int, meta: dict) -> dict:
    """Writes `files` as dist/<tier>-NN/<tier>.tar.partNN (replacing the tier's earlier parts) with the manifest
    in every part's folder; returns the manifest (`meta` is merged into it)."""
    for old in dist.glob(f"{tier}-[0-9]*"):
        shutil.rmtree(old)
    dist.mkdir(parents=True, exist_ok=True)
    writer = _PartWriter(dist, tier, part_bytes)
    entries = []
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files, key=lambda p: p.name):
            info = tar.gettarinfo(str(path), arcname=path.name)
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
            with open(path, "rb") as handle:
                tar.addfile(info, handle)
            entries.append({"name": path.name, "bytes": info.size, "sha256": sha256_file(path)})
    manifest = {"format": FORMAT, "tier": tier, **meta, "tar_bytes": writer.size,
                "tar_sha256": writer.total.hexdigest(), "parts": writer.finish(), "files": entries}
    for part in manifest["parts"]:
        (dist / part["folder"] / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


@dataclass
class TierState:
    """What of a tier's parts is here: `manifest` None when no part folder is."""
    tier: str
    manifest: dict | None = None
    ok: list[str] = field(default_factory=list)  # part folders present with the right size and sum
    missing: list[str] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # "folder: why"

    @property
    def complete(self) -> bool:
        return self.manifest is not None and not self.missing and not self.bad

    def describe(self) -> str:
        if self.manifest is None:
            return f"{self.tier}: no parts here"
        total = len(self.manifest["parts"])
        line = f"{self.tier}: {len(self.ok)} of {total} parts here, sums checked"
        if self.missing:
            shown = self.missing if len(self.missing) <= 4 else [*self.missing[:3], "...", self.missing[-1]]
            line += f"; missing {len(self.missing)}: {', '.join(shown)}"
        if self.bad:
            line += f"; BAD {'; '.join(self.bad)}"
        return line


def scan(dist: Path, tier: str) -> TierState:
    """Checks every part of `tier` under `dist` against its manifest (size, then SHA-256). Parts of two different
    kits (manifests whose tar sums differ) are an error naming both."""
    state = TierState(tier)
    for folder in sorted(dist.glob(f"{tier}-[0-9]*")):
        if not (folder / MANIFEST).is_file():
            state.bad.append(f"{folder.name}: no {MANIFEST}")
            continue
        manifest = json.loads((folder / MANIFEST).read_text())
        if state.manifest is None:
            state.manifest = manifest
        elif manifest["tar_sha256"] != state.manifest["tar_sha256"]:
            raise ValueError(f"{folder} belongs to another kit (tar {manifest['tar_sha256'][:12]}) than the other "
                             f"{tier} parts (tar {state.manifest['tar_sha256'][:12]}): remove the older parts")
    if state.manifest is None:
        return state
    for part in state.manifest["parts"]:
        path = dist / part["folder"] / part["file"]
        if not path.is_file():
            state.missing.append(part["folder"])
        elif path.stat().st_size != part["bytes"]:
            state.bad.append(f"{part['folder']}: {path.stat().st_size} bytes, expected {part['bytes']}")
        elif sha256_file(path) != part["sha256"]:
            state.bad.append(f"{part['folder']}: SHA-256 differs from the manifest")
        else:
            state.ok.append(part["folder"])
    return state


class _PartReader(io.RawIOBase):
    """Reads the parts one after another as one stream, hashing what passes."""

    def __init__(self, paths: list[Path]):
        self.paths, self.total, self._handle = list(paths), hashlib.sha256(), None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while True:
            if self._handle is None:
                if not self.paths:
                    return 0
                self._handle = open(self.paths.pop(0), "rb")
            count = self._handle.readinto(buffer)
            if count:
                self.total.update(memoryview(buffer)[:count])
                return count
            self._handle.close()
            self._handle = None


def extract(dist: Path, state: TierState, dest: Path) -> list[Path]:
    """Joins a complete tier's parts and unpacks its files into `dest`, checking the whole tar's SHA-256 and each
    file's against the manifest. Returns the files."""
    if not state.complete:
        raise ValueError(f"cannot unpack {state.describe()}")
    manifest = state.manifest
    expected = {entry["name"]: entry["sha256"] for entry in manifest["files"]}
    dest.mkdir(parents=True, exist_ok=True)
    reader = _PartReader([dist / p["folder"] / p["file"] for p in manifest["parts"]])
    written = []
    with tarfile.open(fileobj=io.BufferedReader(reader, READ), mode="r|") as tar:
        for member in tar:
            if not member.isfile() or "/" in member.name or member.name not in expected:
                raise ValueError(f"{state.tier}: unexpected member {member.name!r} in the tar")
            target = dest / member.name
            with tar.extractfile(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, READ)
            written.append(target)
        for _ in iter(lambda: reader.read(READ), b""):  # tar padding after the last member
            pass
    if reader.total.hexdigest() != manifest["tar_sha256"]:
        raise ValueError(f"{state.tier}: the joined parts' SHA-256 differs from the manifest")
    for path in written:
        if sha256_file(path) != expected[path.name]:
            raise ValueError(f"{state.tier}: {path.name} differs from the manifest after unpacking")
    if len(written) != len(expected):
        raise ValueError(f"{state.tier}: {len(expected) - len(written)} files of the manifest are not in the tar")
    return written
