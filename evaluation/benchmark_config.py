"""The `suite.benchmarks` section: lm-evaluation-harness tasks (GSM8K, MATH, MMLU-Pro, ...) beside Reasoning Gym rows.

Parsed with the rest of the suite (names, types and paths checked, no lm-eval import); the tasks themselves are
loaded, and their data sets opened, by evaluation/benchmarks.py before any model loads.

    suite:
      benchmarks:
        group: external          # their row group in results and comparisons
        in_verdict: false        # true: they count in the overall row and the held-out verdict like a category
        include_path: [DIR]      # folders of lm-eval task YAMLs (Reasoning Gym's training/evaluations/lmeh works)
        limit: 200               # the first N documents of each task (null: all)
        num_fewshot: null        # null: each task file's own
        apply_chat_template: true
        fewshot_as_multiturn: false
        gen_kwargs: {}           # over the task files' generation settings (max_gen_toks: sampling.max_tokens)
        tasks:
          gsm8k: {task: gsm8k_cot_llama, data_files: DIR/gsm8k.jsonl, filter: strict-match, metric: exact_match}
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

GROUP_KEYS = {"group", "in_verdict", "include_path", "limit", "num_fewshot", "apply_chat_template",
              "fewshot_as_multiturn", "gen_kwargs", "tasks"}
TASK_KEYS = {"task", "data_files", "filter", "metric", "limit", "num_fewshot", "apply_chat_template",
             "fewshot_as_multiturn", "gen_kwargs"}
SPLIT_NAMES = ("test", "validation", "train")


@dataclass
class BenchmarkTask:
    """One lm-eval task (or group of tasks) of the suite."""

    key: str  # name in results (a group's leaves are named by their own task names)
    task: str  # lm-eval task or group name
    data_files: dict[str, str] = field(default_factory=dict)  # split -> local file; "*": every split it reads
    filter: str | None = None  # which of the task's filters decides (None: its first)
    metric: str | None = None  # which metric decides (None: the first of its metric_list)
    limit: int | None = None
    num_fewshot: int | None = None
    apply_chat_template: bool = True
    fewshot_as_multiturn: bool = False
    gen_kwargs: dict = field(default_factory=dict)


@dataclass
class BenchmarksConfig:
    """The benchmarks of one suite: where their task files are and how they run."""

    group: str = "external"
    in_verdict: bool = False
    include_path: list[str] = field(default_factory=list)
    tasks: list[BenchmarkTask] = field(default_factory=list)


def _error(source: str, message: str):
    from evaluation.config import ConfigError

    return ConfigError(f"{source}: {message}")


def _path(value: Any, where: str, source: str) -> str:
    """An existing file or folder: absolute, from the current folder, else from the suite file's folder."""
    if not isinstance(value, str) or not value:
        raise _error(source, f"'{where}' must be a path, got {value!r}")
    for candidate in (value, os.path.join(os.path.dirname(os.path.abspath(source)), value)):
        if os.path.exists(candidate):
            return os.path.abspath(candidate)
    raise _error(source, f"'{where}': {value} does not exist (a relative path is read from the current folder, "
                         f"then from the suite file's folder)")


def _data_files(value: Any, where: str, source: str) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, str):
        return {"*": _path(value, where, source)}
    if not isinstance(value, dict) or not value:
        raise _error(source, f"'{where}' must be a file (read for every split the task uses) or a mapping "
                             f"split: file, got {value!r}")
    bad = [s for s in value if s not in SPLIT_NAMES]
    if bad:
        raise _error(source, f"'{where}': unknown split {bad}; use {', '.join(SPLIT_NAMES)}")
    return {split: _path(path, f"{where}.{split}", source) for split, path in value.items()}


def _settings(raw: dict, defaults: dict, where: str, source: str) -> dict:
    """limit, num_fewshot, apply_chat_template, fewshot_as_multiturn, gen_kwargs: checked, over `defaults`."""
    out = dict(defaults)
    for key in ("limit", "num_fewshot"):
        if key in raw:
            value = raw[key]
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0
                                      or (key == "limit" and value == 0)):
                raise _error(source, f"'{where}.{key}' must be a {'positive' if key == 'limit' else 'non-negative'} "
                                     f"integer or null, got {value!r}")
            out[key] = value
    for key in ("apply_chat_template", "fewshot_as_multiturn"):
        if key in raw:
            if not isinstance(raw[key], bool):
                raise _error(source, f"'{where}.{key}' must be true/false, got {raw[key]!r}")
            out[key] = raw[key]
    if "gen_kwargs" in raw:
        if not isinstance(raw["gen_kwargs"] or {}, dict):
            raise _error(source, f"'{where}.gen_kwargs' must be a mapping, got {raw['gen_kwargs']!r}")
        out["gen_kwargs"] = {**out.get("gen_kwargs", {}), **(raw["gen_kwargs"] or {})}
    return out


def parse_benchmarks(raw: Any, source: str) -> BenchmarksConfig | None:
    """`suite.benchmarks` -> BenchmarksConfig (None when absent); every error names the key and the fix."""
    from evaluation.config import _check_keys, _mapping

    if raw is None:
        return None
    where = "suite.benchmarks"
    raw = _mapping(raw, where, source)
    _check_keys(raw, GROUP_KEYS, f"{where}.", source)
    group = raw.get("group", "external")
    if not isinstance(group, str) or not group or "/" in group:
        raise _error(source, f"'{where}.group' must be a name without '/', got {group!r}")
    in_verdict = raw.get("in_verdict", False)
    if not isinstance(in_verdict, bool):
        raise _error(source, f"'{where}.in_verdict' must be true/false, got {in_verdict!r}")
    include = raw.get("include_path") or []
    include = [include] if isinstance(include, str) else include
    if not isinstance(include, list):
        raise _error(source, f"'{where}.include_path' must be a folder or a list of folders, got {include!r}")
    defaults = _settings(raw, {"limit": None, "num_fewshot": None, "apply_chat_template": True,
                               "fewshot_as_multiturn": False, "gen_kwargs": {}}, where, source)
    cfg = BenchmarksConfig(group=group, in_verdict=in_verdict,
                           include_path=[_path(p, f"{where}.include_path", source) for p in include])
    tasks = _mapping(raw.get("tasks"), f"{where}.tasks", source)
    if not tasks:
        raise _error(source, f"'{where}.tasks' is empty; name lm-eval tasks, e.g. 'gsm8k: {{task: gsm8k_cot_llama}}'")
    for key, spec in tasks.items():
        at = f"{where}.tasks.{key}"
        spec = _mapping(spec, at, source)
        _check_keys(spec, TASK_KEYS, f"{at}.", source)
        if "/" in str(key):
            raise _error(source, f"'{at}': a task key may not hold '/'")
        for name in ("task", "filter", "metric"):
            if name in spec and (not isinstance(spec[name], str) or not spec[name]):
                raise _error(source, f"'{at}.{name}' must be a name, got {spec[name]!r}")
        cfg.tasks.append(BenchmarkTask(key=str(key), task=spec.get("task", str(key)),
                                       data_files=_data_files(spec.get("data_files"), f"{at}.data_files", source),
                                       filter=spec.get("filter"), metric=spec.get("metric"),
                                       **_settings(spec, defaults, at, source)))
    return cfg
