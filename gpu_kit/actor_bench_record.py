"""gpu_kit/actor_bench.py's record: its table, a path's one-line summary, and what an earlier command measured
(the kit's commands end at 10 minutes: a stage cut off resumes at the model it was measuring)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def table(record: dict) -> str:
    lines = [f"# Actor forward + backward, path against path ({record['device']}, torch {record['torch']}, "
             f"transformers {record['transformers']})", ""]
    for name, model in record["models"].items():
        shape = model.get("shape", {})
        lines += [f"## {name}: {shape.get('prompts')} x {shape.get('samples')} sequences, prompts <= "
                  f"{shape.get('max_prompt')}, responses {shape.get('response')} tokens; checkpointing "
                  f"{shape.get('checkpointing')}", "",
                  "| path | status | s/step (median) | tokens/s | MFU | peak GiB | hidden rel. diff | log-prob diff |",
                  "|---|---|---|---|---|---|---|---|"]
        for path, r in model.get("attention", {}).items():
            a = r.get("agreement", {})
            lines.append(f"| {path} | {r['status']}{': ' + r['why'] if r.get('why') else ''} | {r.get('median_s', '')}"
                         f" | {r.get('tokens_per_s', '')} | {r.get('mfu', '')} | {r.get('peak_memory_gib', '')} | "
                         f"{a.get('hidden_max_rel', '')} | {a.get('logprob_max_abs', '')} |")
        lines += ["", "| log-prob path | status | s (median) | tokens | peak GiB | diff to chunked_fp32 |",
                  "|---|---|---|---|---|---|"]
        for path, r in model.get("logprob", {}).items():
            lines.append(f"| {path} | {r['status']}{': ' + r['why'] if r.get('why') else ''} | "
                         f"{r.get('median_s', '')} | {r.get('tokens', '')} | {r.get('peak_memory_gib', '')} | "
                         f"{r.get('diff_to_chunked', '')} |")
        lines.append("")
    return "\n".join(lines)


def previous_models(path: Path, record: dict) -> dict:
    """The models an earlier command measured into `path` on the same device, torch and settings (the kit's
    commands end at 10 minutes: a stage cut off resumes at the model it was measuring)."""
    try:
        before = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    same = all(before.get(k) == record[k] for k in ("device", "torch", "transformers", "dry_run", "steps"))
    return before.get("models", {}) if same else {}


def complete(entry: dict, attention: list[str], logprob: list[str]) -> bool:
    return set(attention) <= set(entry.get("attention", {})) and set(logprob) <= set(entry.get("logprob", {}))


def summary_of(result: dict) -> str:
    if result.get("status") != "ok":
        return f"{result.get('status')} ({result.get('why')})"
    parts = [f"{result['median_s']} s"]
    if result.get("tokens_per_s"):
        parts.append(f"{result['tokens_per_s']:.0f} tok/s")
    if result.get("mfu") is not None:
        parts.append(f"MFU {result['mfu']:.1%}")
    if result.get("peak_memory_gib") is not None:
        parts.append(f"{result['peak_memory_gib']} GiB")
    if result.get("agreement"):
        parts.append(f"hidden {result['agreement']['hidden_max_rel']:.2g}, log-prob "
                     f"{result['agreement']['logprob_max_abs']:.2g} from sdpa_padded")
    if result.get("diff_to_chunked") is not None:
        parts.append(f"{result['diff_to_chunked']:.2g} from chunked_fp32")
    return ", ".join(parts)
