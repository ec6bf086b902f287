"""Task mixes: which Reasoning Gym tasks to draw, how often, with which config and difficulty level.

A mix is declared in YAML (configs/mix/NAME.yaml) or inline in a hydra config, and validated here once, when it is
loaded, so that a typo fails before any process starts:

    tasks:
      chain_sum: {weight: 1.0, config: {min_terms: 2, max_terms: 4}}
      hard_sum: {task: chain_sum, weight: 0.5, config: {min_terms: 5}}   # an alias: same task, other config
      spell_backward: {weight: 1.0, level: 0}                           # config from RG's curriculum at level 0
    held_out: [number_sorting]          # evaluated, never trained on
    curriculum: {enabled: true, window: 64, promote_at: 0.7, demote_at: 0.3, min_samples: 32}
    sampler: {strategy: learnability, signal: advantage, window: 64, temperature: 0.1, exploration: 0.5, floor: 0.1}

Dependencies run one way: tasks <- mix <- curriculum (levels per task), mix <- sampler (shares across tasks), and the
stream uses both. This module validates the settings of both; the rules that act on them live in their own modules.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from envs.tasks import check_level, check_task_name, validate_task_config

_TASK_KEYS = {"task", "weight", "config", "level"}
_MIX_KEYS = {"tasks", "held_out", "curriculum", "sampler"}
SAMPLER_STRATEGIES = ("uniform", "learnability")
SAMPLER_SIGNALS = ("advantage", "variance")
MIX_DIR = Path(__file__).resolve().parents[1] / "configs" / "mix"


@dataclass(frozen=True)
class TaskSpec:
    """One entry of a mix."""

    key: str  # name in the mix (the task name, or an alias); used for metrics and curriculum state
    task: str  # Reasoning Gym task name
    weight: float  # relative sampling weight, > 0
    config: dict[str, Any] = field(default_factory=dict)  # Reasoning Gym config keyword arguments
    level: int | None = None  # start level of RG's curriculum for this task; None = fixed `config`


@dataclass(frozen=True)
class CurriculumSettings:
    """How per-task levels move with the scores of recent responses (see envs.curriculum)."""

    enabled: bool = False  # move levels during training; False keeps each task at its start level
    window: int = 64  # how many recent scores per task are averaged
    promote_at: float = 0.7  # mean score at or above which the level goes up
    demote_at: float = 0.3  # mean score at or below which the level goes down
    min_samples: int = 32  # scores needed since the last change before the level may move again


@dataclass(frozen=True)
class SamplerSettings:
    """How each task's share of the training stream follows what the trainer observes (see envs.sampler)."""

    strategy: str = "uniform"  # "uniform": the declared weights, fixed; "learnability": shares follow the signal
    signal: str = "advantage"  # "advantage": mean |GRPO advantage| of a group; "variance": 1 if its scores differ
    window: int = 64  # how many recent groups per task the signal averages
    temperature: float = 0.1  # softmax temperature over signal + exploration bonus; larger = closer to the prior
    exploration: float = 0.5  # UCB bonus coefficient: c * sqrt(ln(1 + groups in all windows) / (1 + task's groups))
    floor: float = 0.1  # every task keeps at least floor x its declared share of the stream

    @property
    def reweights(self) -> bool:
        return self.strategy != "uniform"


@dataclass(frozen=True)
class Mix:
    """A validated mix: tasks with weights, held-out task names and curriculum settings."""

    tasks: tuple[TaskSpec, ...]
    held_out: tuple[str, ...] = ()
    curriculum: CurriculumSettings = CurriculumSettings()
    sampler: SamplerSettings = SamplerSettings()
    source: str = "<inline>"  # file the mix came from, for error messages

    def task(self, key: str) -> TaskSpec:
        """Returns the spec for a mix key; raises KeyError naming the keys."""
        for spec in self.tasks:
            if spec.key == key:
                return spec
        raise KeyError(f"mix {self.source} has no task '{key}' (tasks: {', '.join(s.key for s in self.tasks)})")

    @property
    def keys(self) -> list[str]:
        return [spec.key for spec in self.tasks]


def load_mix(source: str | Path | Mapping[str, Any] | Mix) -> Mix:
    """Returns a validated Mix from a YAML file path, a mapping (e.g. a hydra node as a dict) or a Mix."""
    if isinstance(source, Mix):
        return source
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"mix file not found: {path}")
        data, where = yaml.safe_load(path.read_text()) or {}, str(path)
    else:
        data, where = dict(source), "<inline>"
    return _parse_mix(data, where)


def _parse_mix(data: Mapping[str, Any], where: str) -> Mix:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: a mix must be a mapping with a 'tasks' key, got {type(data).__name__}")
    unknown = set(data) - _MIX_KEYS
    if unknown:
        raise ValueError(f"{where}: unknown mix key(s) {sorted(unknown)}; allowed: {sorted(_MIX_KEYS)}")
    tasks = data.get("tasks")
    if not isinstance(tasks, Mapping) or not tasks:
        raise ValueError(f"{where}: 'tasks' must be a non-empty mapping of task name -> {{weight, config, level}}")
    specs = tuple(_parse_task(str(key), value, where) for key, value in tasks.items())
    held_out = tuple(check_task_name(str(n), f"{where}: held_out: ") for n in data.get("held_out") or ())
    trained = {spec.task for spec in specs}
    for name in held_out:
        if name in trained:
            raise ValueError(f"{where}: task '{name}' is both trained on and held out; remove it from one of them")
    return Mix(specs, held_out, _parse_curriculum(data.get("curriculum") or {}, where),
               _parse_sampler(data.get("sampler") or {}, where), where)


def _parse_task(key: str, value: Any, where: str) -> TaskSpec:
    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: tasks.{key} must be a mapping like {{weight: 1.0, config: {{}}}}, got {value!r}")
    unknown = set(value) - _TASK_KEYS
    if unknown:
        raise ValueError(f"{where}: tasks.{key}: unknown key(s) {sorted(unknown)}; allowed: {sorted(_TASK_KEYS)}")
    task = check_task_name(str(value.get("task", key)), f"{where}: tasks.{key}: ")
    weight = value.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise ValueError(f"{where}: tasks.{key}.weight must be a finite number > 0, got {weight!r}")
    config = validate_task_config(task, dict(value.get("config") or {}), f"{where}: tasks.{key}: ")
    level = value.get("level")
    if level is not None:
        check_level(task, level, f"{where}: tasks.{key}.level: ")
    return TaskSpec(key, task, float(weight), config, level)


def _parse_curriculum(value: Mapping[str, Any], where: str) -> CurriculumSettings:
    names = {f.name for f in dataclasses.fields(CurriculumSettings)}
    unknown = set(value) - names
    if unknown:
        raise ValueError(f"{where}: curriculum: unknown key(s) {sorted(unknown)}; allowed: {sorted(names)}")
    settings = CurriculumSettings(**value)
    if not 0 <= settings.demote_at < settings.promote_at <= 1:
        raise ValueError(
            f"{where}: curriculum: need 0 <= demote_at < promote_at <= 1, got "
            f"demote_at={settings.demote_at}, promote_at={settings.promote_at}"
        )
    if settings.window < 1 or not 1 <= settings.min_samples <= settings.window:
        raise ValueError(f"{where}: curriculum: need window >= 1 and 1 <= min_samples <= window")
    return settings


def _parse_sampler(value: Any, where: str) -> SamplerSettings:
    fields = {f.name: f for f in dataclasses.fields(SamplerSettings)}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: sampler must be a mapping like {{strategy: learnability, window: 64}}, got {value!r}")
    unknown = set(value) - set(fields)
    if unknown:
        raise ValueError(f"{where}: sampler: unknown key(s) {sorted(unknown)}; allowed: {sorted(fields)}")
    strategy = value.get("strategy", "uniform")
    if strategy not in SAMPLER_STRATEGIES:
        raise ValueError(f"{where}: sampler.strategy must be one of {list(SAMPLER_STRATEGIES)}, got {strategy!r}")
    signal = value.get("signal", "advantage")
    if signal not in SAMPLER_SIGNALS:
        raise ValueError(f"{where}: sampler.signal must be one of {list(SAMPLER_SIGNALS)}, got {signal!r}")

    def number(name: str, low: float, high: float, low_open: bool, high_open: bool, integer: bool = False) -> Any:
        x = value.get(name, fields[name].default)
        kind = int if integer else (int, float)
        ok = not isinstance(x, bool) and isinstance(x, kind) and math.isfinite(x)
        ok = ok and (x > low if low_open else x >= low) and (x < high if high_open else x <= high)
        if not ok:
            interval = f"{'(' if low_open else '['}{low}, {'inf' if math.isinf(high) else high}{')' if high_open else ']'}"
            what = "an integer" if integer else "a finite number"
            raise ValueError(f"{where}: sampler.{name} must be {what} in {interval}, got {x!r} (default "
                             f"{fields[name].default})")
        return x

    return SamplerSettings(
        strategy=strategy,
        signal=signal,
        window=number("window", 1, math.inf, False, True, integer=True),
        temperature=float(number("temperature", 0.0, math.inf, True, True)),
        exploration=float(number("exploration", 0.0, math.inf, False, True)),
        floor=float(number("floor", 0.0, 1.0, False, False)),
    )


def mix_path(mix: str) -> Path:
    """Returns the YAML file of `env.mix`: a path as given, else configs/mix/<name>.yaml."""
    path = Path(str(mix)).expanduser()
    if path.suffix in (".yaml", ".yml") or path.is_file():
        return path
    candidate = MIX_DIR / f"{mix}.yaml"
    if not candidate.is_file():
        known = ", ".join(sorted(p.stem for p in MIX_DIR.glob("*.yaml")))
        raise FileNotFoundError(f"env.mix={mix!r}: no file {candidate}; use one of: {known}, or a path to a mix YAML")
    return candidate
