"""Training generation dumps: a few whole GRPO groups per step, with our reward fields, as JSONL.

verl's own training dump (`trainer.rollout_data_dir`) holds input, output, ground truth and score only; this one adds
what envs' reward found. Settings under `env.dump` (configs/base/grpo.yaml):
- `every_steps`: dump generations at steps 1, 1+N, 1+2N, ... (0: off, summaries included);
- `groups_per_step`: whole groups (a prompt's rollout.n responses) written per dumped step, taken round-robin over the
  step's tasks so that every task shows up;
- `dir`: the folder, by default `<trainer.default_local_dir>/generations/train` (null: off).

Files in `dir`:
- `<step>.jsonl`, one line per response (replaced when a resumed run takes that step again):
  {"step", "group" (verl's uid), "sample" (index in the group), "task" (mix key), "prompt", "response" (decoded as
  verl's dump does), "ground_truth", "pred" (the extracted answer), "score" (the reward the policy got), "acc",
  "answer_found", "format_ok", "truncated" (cut at data.max_response_length), "reason", "response_length" (tokens)};
- `steps.jsonl`, one line per step (every step, not only dumped ones), over all of the step's responses:
  {"step", "tasks": {task: {"reward", "accuracy", "answer_rate", "truncated", "samples"}}, "zero_variance_groups" (the share of the
  step's groups whose scores are all equal: env/zero_variance_groups)}; a resumed run may append a step again, and the
  last line of a step counts. training/report/report.py turns it into the run's table and curves.
verl's validation dumps (`trainer.validation_data_dir`, by default `<default_local_dir>/generations/val`) land beside
them. `python -m utils.generation_viewer <default_local_dir> -o page.html` shows both.
"""

from __future__ import annotations

import json
import logging
import os
from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean
from typing import Any, Sequence

from training.trainer.metrics import SampleRecord, reward_extra_info, zero_variance_fraction

logger = logging.getLogger(__name__)
SUMMARY_FILE = "steps.jsonl"


@dataclass(frozen=True)
class DumpSettings:
    """env.dump: where and how much of each step's generations to write."""

    directory: str | None
    every_steps: int = 1
    groups_per_step: int = 4

    @classmethod
    def from_config(cls, config) -> "DumpSettings":
        dump = config.env.get("dump") or {}
        directory = dump.get("dir")
        return cls(directory=None if directory is None else str(directory),
                   every_steps=int(dump.get("every_steps", 1) or 0),
                   groups_per_step=int(dump.get("groups_per_step", 4) or 0))

    @property
    def enabled(self) -> bool:
        return bool(self.directory) and self.every_steps > 0

    def dumps_generations_at(self, step: int) -> bool:
        """True at steps 1, 1 + every_steps, ... (the first step is always shown)."""
        return self.enabled and self.groups_per_step > 0 and (int(step) - 1) % self.every_steps == 0


def pick_groups(records: Sequence[SampleRecord], count: int) -> list[str]:
    """Returns up to `count` group ids, round-robin over tasks (sorted), each task's groups in first-seen order."""
    by_task: dict[str, list[str]] = defaultdict(list)
    for record in records:
        if record.group not in by_task[record.task]:
            by_task[record.task].append(record.group)
    queues = [list(groups) for _, groups in sorted(by_task.items())]
    picked: list[str] = []
    while len(picked) < count and any(queues):
        for queue in queues:
            if queue and len(picked) < count:
                picked.append(queue.pop(0))
    return picked


def step_summary(step: int, records: Sequence[SampleRecord]) -> dict[str, Any]:
    """Returns the steps.jsonl line of one step: per-task means over all of its responses, and the share of its
    groups with no GRPO signal (all scores equal)."""
    by_task: dict[str, list[SampleRecord]] = defaultdict(list)
    for record in records:
        by_task[record.task].append(record)
    tasks = {task: {"reward": fmean(r.score for r in rows), "accuracy": fmean(r.accuracy for r in rows),
                    "answer_rate": fmean(r.answer_found for r in rows), "truncated": fmean(r.truncated for r in rows),
                    "samples": len(rows)}
             for task, rows in sorted(by_task.items())}
    return {"step": int(step), "tasks": tasks, "zero_variance_groups": zero_variance_fraction(records)}


def generation_rows(step: int, records: Sequence[SampleRecord], fields: Sequence[dict[str, Any]],
                    prompts: Sequence[str], responses: Sequence[str]) -> list[dict[str, Any]]:
    """Returns the <step>.jsonl lines: one per response, grouped, numbered within their group.

    `fields[i]` holds the response's `extra_info` (the item: entry, task) and `reward` (envs' reward dict).
    """
    rows, seen = [], defaultdict(int)
    for record, field, prompt, response in zip(records, fields, prompts, responses, strict=True):
        reward, info = field.get("reward") or {}, field.get("extra_info") or {}
        entry = info.get("entry") or {}
        rows.append({
            "step": int(step), "group": record.group, "sample": seen[record.group], "task": record.task,
            "prompt": prompt, "response": response, "ground_truth": entry.get("answer"),
            "pred": reward.get("pred"), "score": record.score, "acc": record.accuracy,
            "answer_found": record.answer_found, "format_ok": record.format_ok, "truncated": record.truncated,
            "reason": reward.get("reason", ""), "response_length": int(record.response_length),
        })
        seen[record.group] += 1
    order = {group: n for n, group in enumerate(dict.fromkeys(r["group"] for r in rows))}
    return sorted(rows, key=lambda r: (order[r["group"]], r["sample"]))


def _json_line(value: dict) -> str:
    return json.dumps(value, ensure_ascii=False, default=str) + "\n"


def write_step_file(directory: str, step: int, rows: Sequence[dict]) -> str:
    """Writes `<directory>/<step>.jsonl` whole (temporary file, then rename); returns its path."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{int(step)}.jsonl")
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.writelines(_json_line(row) for row in rows)
    os.replace(tmp, path)
    return path


def append_summary(directory: str, summary: dict) -> None:
    """Appends one line to `<directory>/steps.jsonl`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, SUMMARY_FILE), "a", encoding="utf-8") as fh:
        fh.write(_json_line(summary))


def read_generation_fields(keys: Sequence[str], partition_id: str, tokenizer) -> tuple[list, list, list]:
    """Returns (fields, prompts, responses) of `keys` from TransferQueue, texts decoded as verl's dump decodes them.

    fields[i] = {"extra_info": ..., "reward": reward extra info}. Token fields are jagged: each row is sliced whole,
    so no padding token is decoded.
    """
    import transfer_queue as tq

    data = tq.kv_batch_get(keys=list(keys), partition_id=partition_id,
                           select_fields=["prompts", "responses", "extra_info", "extra_fields"])

    def texts(name: str) -> list[str]:
        return [tokenizer.decode(ids.tolist(), skip_special_tokens=True) for ids in data[name].unbind()]

    fields = []
    for info, extra in zip(list(data["extra_info"]), list(data["extra_fields"]), strict=True):
        fields.append({"extra_info": info if isinstance(info, dict) else {}, "reward": reward_extra_info(extra)})
    return fields, texts("prompts"), texts("responses")


def dump_step(settings: DumpSettings, step: int, keys: Sequence[str], records: Sequence[SampleRecord],
              partition_id: str, tokenizer) -> str | None:
    """Appends the step's summary and, on a dump step, writes its picked groups; returns the step file or None.

    `keys[i]` is the TransferQueue key of `records[i]`. A failed write (disk full, permissions) is logged, not raised:
    a dump never stops a training run.
    """
    if not settings.enabled or not records:
        return None
    try:
        append_summary(settings.directory, step_summary(step, records))
        if not settings.dumps_generations_at(step):
            return None
        groups = set(pick_groups(records, settings.groups_per_step))
        chosen = sorted((i for i, record in enumerate(records) if record.group in groups), key=lambda i: keys[i])
        fields, prompts, responses = read_generation_fields([keys[i] for i in chosen], partition_id, tokenizer)
        rows = generation_rows(step, [records[i] for i in chosen], fields, prompts, responses)
        return write_step_file(settings.directory, step, rows)
    except OSError as err:
        logger.warning("generation dump of step %s to %s failed: %s", step, settings.directory, err)
        return None
