"""A held-out suite derived from a training mix, for a run whose config names none (`env.eval_suite`).

Each task of the mix is evaluated on its evaluation split (questions never trained or validated on: envs/splits.py),
with the config it trains with, so a custom mix is judged on its own tasks rather than on unrelated ones. The size is
the one the shipped paired-interval suite uses: configs/eval/quickstart.yaml's `in_mix` has 150 items a task, where
the paired difference of greedy accuracy between two checkpoints (per-item standard deviation ~0.4) gives a 95%
interval of about +-0.037 over three tasks. The mix's `held_out` tasks, if any, form their own group.
"""

from __future__ import annotations

from typing import Any

from envs.curriculum import leveled_config
from envs.mix import Mix, TaskSpec

ITEMS_PER_TASK = 150  # configs/eval/quickstart.yaml, in_mix
SEED = 42  # the evaluation seed of every shipped suite
IN_MIX, HELD_OUT = "in_mix", "held_out"


def task_config(spec: TaskSpec) -> dict[str, Any]:
    """The config the task trains with: its fixed config, or its curriculum's at the start level."""
    return leveled_config(spec.task, spec.config, spec.level) if spec.level is not None else dict(spec.config)


def suite_from_mix(mix: Mix, on_cpu: bool) -> dict:
    """An evaluation config (evaluation/config.py's schema) for `mix`: greedy, every task at ITEMS_PER_TASK items.
    `on_cpu`: the HF backend in fp32 (the CPU's), else vLLM in bf16. The evaluator's `--from-run` adds the run's
    scoring and sampling, `--model` the model."""
    in_mix = {spec.key: {"task": spec.task, "config": task_config(spec)} for spec in mix.tasks}
    categories = {IN_MIX: {"size": ITEMS_PER_TASK, "tasks": in_mix}}
    if mix.held_out:
        categories[HELD_OUT] = {"size": ITEMS_PER_TASK, "tasks": {name: {"config": {}} for name in mix.held_out}}
    model = {"path": "", "backend": "hf", "dtype": "float32", "batch_size": 64} if on_cpu else \
        {"path": "", "backend": "vllm", "dtype": "bfloat16"}
    return {"model": model, "decoding": ["greedy"], "pass_k": [1],
            "suite": {"seed": SEED, "categories": categories}}


def describe(mix_name: str, suite: dict) -> str:
    """One console line's worth: what the derived suite holds."""
    groups = suite["suite"]["categories"]
    parts = [f"{len(group['tasks'])} task(s) {'of the mix' if name == IN_MIX else 'held out'}"
             for name, group in groups.items()]
    items = sum(len(group["tasks"]) * group["size"] for group in groups.values())
    return (f"{items} evaluation-split items of mix {mix_name}, {ITEMS_PER_TASK} per task "
            f"({', '.join(parts)}; greedy)")
