"""The task stream to parquet, for other trainers: N items of a mix and split in verl's dataset layout.

    python -m envs.to_parquet --mix easy --split train --seed 0 --size 1000 -o data/easy_train.parquet

Columns (one fixed Arrow schema for every mix, so files of different mixes concatenate):
- `prompt`: chat messages [{role, content}, ...] (system prompt, then the question), as the stream's `raw_prompt`;
- `data_source`: "reasoning_gym/<task>";
- `reward_model`: {style: "rule", ground_truth: the entry's answer (null for tasks without a single answer)};
- `extra_info`: {entry_json, task, task_name, config_text, level, split, seed, position, index}. `entry_json` is the
  Reasoning Gym entry (question, answer, metadata) as JSON text (envs.entry_json): metadata differs from task to task
  and has no fixed schema. envs.verl_reward.compute_score decodes it, so the reward scores against the carried entry
  exactly as it does for stream items.

The rows are the stream's items at positions 0, 1, ... of (mix, split, seed), so the same arguments give the same file,
byte for byte (same pyarrow version). The file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from envs.entry_json import decode_entry, encode_entry, same_value
from envs.mix import load_mix, mix_path
from envs.prompts import DEFAULT_SYSTEM_PROMPT
from envs.splits import SPLITS
from envs.stream import TaskStream, mix_fingerprint

FORMAT_VERSION = 1
METADATA_KEY = b"rg_grpo"
ROW_GROUP_SIZE = 1024

SCHEMA = pa.schema([
    pa.field("prompt", pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))),
    pa.field("data_source", pa.string()),
    pa.field("reward_model", pa.struct([pa.field("style", pa.string()), pa.field("ground_truth", pa.string())])),
    pa.field("extra_info", pa.struct([
        pa.field("entry_json", pa.string()),
        pa.field("task", pa.string()),
        pa.field("task_name", pa.string()),
        pa.field("config_text", pa.string()),
        pa.field("level", pa.int64()),
        pa.field("split", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("position", pa.int64()),
        pa.field("index", pa.int64()),
    ])),
])


def to_row(item: dict[str, Any]) -> dict[str, Any]:
    """Returns a stream item (envs.stream.TaskStream) as a row of SCHEMA; raises if its entry would not read back."""
    info = item["extra_info"]
    entry = info["entry"]
    entry_json = encode_entry(entry)
    if not same_value(entry, decode_entry(entry_json)):  # cheap next to generation; a wrong reward is not
        raise ValueError(f"the entry of task '{info['task']}' at position {info['position']} does not survive JSON "
                         "encoding (envs.entry_json); it cannot be exported")
    answer = item["reward_model"]["ground_truth"]
    return {
        "prompt": [{"role": m["role"], "content": m["content"]} for m in item["raw_prompt"]],
        "data_source": item["data_source"],
        "reward_model": {"style": item["reward_model"].get("style", "rule"),
                         "ground_truth": answer if answer is None or isinstance(answer, str) else encode_entry(answer)},
        "extra_info": {"entry_json": entry_json, "task": info["task"], "task_name": info["task_name"],
                       "config_text": info["config_text"], "level": info["level"], "split": info["split"],
                       "seed": info["seed"], "position": info["position"], "index": info["index"]},
    }


def _batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_parquet(mix: Any, split: str, seed: int, size: int, output: str | os.PathLike,
                  system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, progress: bool = True,
                  producer_processes: int | None = None, row_group_size: int = ROW_GROUP_SIZE) -> Path:
    """Writes the first `size` items of the (mix, split, seed) stream to `output` (parquet); returns its path.

    `mix`: a Mix, a mapping, or a YAML path (resolve names with envs.mix.mix_path). Atomic: a reader sees the
    old file or the complete new one, never a partial file.
    """
    if size < 1:
        raise ValueError(f"size must be >= 1, got {size}")
    from tqdm import tqdm

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    mix = load_mix(mix)
    stream = TaskStream(mix, split=split, seed=seed, system_prompt=system_prompt,
                        producer_processes=producer_processes)
    metadata = {"format_version": FORMAT_VERSION, "mix_fingerprint": mix_fingerprint(mix), "mix_tasks": mix.keys,
                "split": split, "seed": seed, "size": size, "system_prompt": stream.system_prompt,
                "entry_encoding": "envs.entry_json"}
    schema = SCHEMA.with_metadata({METADATA_KEY: json.dumps(metadata, sort_keys=True).encode()})
    handle, temporary = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    os.close(handle)
    try:
        with tqdm(total=size, unit="item", desc=f"{output.name}", disable=not progress, file=sys.stderr) as bar:
            rows = (to_row(item) for item in itertools.islice(iter(stream), size))
            with pq.ParquetWriter(temporary, schema, compression="zstd") as writer:
                for batch in _batches(rows, row_group_size):
                    writer.write_table(pa.Table.from_pylist(batch, schema=schema), row_group_size=row_group_size)
                    bar.update(len(batch))
        with open(temporary, "rb") as file:
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, output)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    finally:
        stream.close()
    return output


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """Returns what write_parquet recorded about a file (mix fingerprint and tasks, split, seed, size, system prompt)."""
    return json.loads(pq.read_schema(path).metadata[METADATA_KEY])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m envs.to_parquet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", required=True, help="configs/mix/NAME.yaml by NAME, or a path to a mix YAML")
    parser.add_argument("--split", default="train", choices=SPLITS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, required=True, help="number of items (rows)")
    parser.add_argument("-o", "--output", required=True, help="parquet file to write (parent folders are created)")
    parser.add_argument("--system-prompt", default=DEFAULT_SYSTEM_PROMPT,
                        help="a Reasoning Gym SYSTEM_PROMPTS name or literal text; '' for none")
    parser.add_argument("--producer-processes", type=int, default=None,
                        help="processes generating slow tasks ahead (default: 2 when the mix has any)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    path = write_parquet(mix_path(args.mix), args.split, args.seed, args.size, args.output,
                         system_prompt=args.system_prompt or None, progress=not args.no_progress,
                         producer_processes=args.producer_processes)
    print(f"wrote {args.size} items of {args.mix} ({args.split}, seed {args.seed}) to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
