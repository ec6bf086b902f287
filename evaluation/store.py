"""Crash-safe generation log: one JSON line per (item, sample), appended and fsynced as results arrive.

A rerun reads the log, skips every finished (item_id, sample) pair and appends only the missing ones; a line cut
short by a crash is dropped (and cut off the file) so the log never holds duplicates or half records.
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger(__name__)


def _jsonable(value):
    """Metadata may hold sets, tuples or numpy scalars: keep it readable, never fail the write."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    if hasattr(value, "item"):
        return value.item()
    return str(value)


class GenerationStore:
    """Append-only JSONL of generation records keyed by ('item_id', 'sample')."""

    def __init__(self, path: str):
        self.path = path
        self.records: dict[tuple[str, int], dict] = {}
        self._load()
        self._fh = None

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as fh:
            data = fh.read()
        keep = data.rfind(b"\n") + 1  # bytes up to the last complete line
        if keep < len(data):
            log.warning("%s: dropping a truncated last line (%d bytes) from an interrupted run",
                        self.path, len(data) - keep)
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
        for number, line in enumerate(data[:keep].splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d: unreadable record skipped", self.path, number)
                continue
            self.records[(rec["item_id"], int(rec["sample"]))] = rec

    def done(self, item_id: str, sample: int) -> bool:
        """True when this (item, sample) already has a record."""
        return (item_id, sample) in self.records

    def append(self, record: dict) -> None:
        """Write one record durably (flush + fsync) unless its key is already there."""
        key = (record["item_id"], int(record["sample"]))
        if key in self.records:
            return
        if self._fh is None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(json.dumps(record, default=_jsonable, ensure_ascii=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.records[key] = record

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def atomic_write(path: str, text: str | bytes) -> None:
    """Write via a temporary file + rename, so readers never see half a file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(tmp, mode) as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
