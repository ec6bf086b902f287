"""Simulation: does learnability-driven task sampling reach a target accuracy in fewer steps than fixed weights?

    python bench/bench_sampler.py                 # 10 seeds, ~5 s on one core
    python bench/bench_sampler.py --seeds 3 --json

The model (a toy, stated so it can be argued with):
- K tasks; task k has a skill logit z_k and the learner answers correctly with p_k = sigmoid(z_k), independently per
  response. Start accuracies (TASKS): two far too easy (0.98, 0.95), two learnable (0.5, 0.3), two far too hard
  (0.03, 0.01).
- A step draws B prompts, each prompt's task from the strategy's current shares, and G responses per prompt (a GRPO
  group). Scores are 0/1.
- Learning happens only through informative groups: each group raises its task's logit by LR x its mean |GRPO
  advantage| (envs.sampler.group_value; 0 for a group whose responses all score the same, as in GRPO). Nothing
  transfers between tasks, nothing is forgotten, there is no noise in the update.
- Goal: steps until the mean accuracy over tasks reaches TARGET (capped at MAX_STEPS; a run that never gets there
  counts as MAX_STEPS and is reported).

Strategies:
- uniform: the declared (equal) weights, fixed (the stream's default).
- learnability: envs.sampler.TaskSampler itself (signal `advantage`, its default window/temperature/exploration/floor),
  updated with each step's groups, as the trainer does.
- SEC (Self-Evolving Curriculum, Chen et al. 2025): a bandit over tasks; after a step each sampled task's value is
  moved by TD(0), Q_k <- Q_k + alpha (r_k - Q_k), with r_k the mean absolute advantage of its groups that step;
  Boltzmann selection p_k proportional to exp(Q_k / tau). alpha and tau are ours (SEC_ALPHA, SEC_TAU), not the paper's.

What it shows: whether spending rollouts where groups have variance buys accuracy per step under the assumption that
only such groups teach. What it does not show: anything about real models (transfer between tasks, forgetting, noisy
gradients, response-length effects, the cost of a rollout differing per task), nor that the default sampler settings
are good for a real run; the real comparison is bench/bench_sampler_training.py (not run yet, see BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.mix import load_mix  # noqa: E402
from envs.sampler import TaskSampler, group_value  # noqa: E402

TASKS = {"easy_a": 0.98, "easy_b": 0.95, "mid_a": 0.5, "mid_b": 0.3, "hard_a": 0.03, "hard_b": 0.01}
PROMPTS, GROUP = 32, 8  # prompts per step (B), responses per prompt (G)
LR = 0.03  # logit gained per informative group, times its mean |advantage|
TARGET, MAX_STEPS = 0.8, 1000
SEC_ALPHA, SEC_TAU = 0.5, 0.1
STRATEGIES = ("uniform", "learnability", "sec")


def logit(p: float) -> float:
    return math.log(p / (1 - p))


class Uniform:
    def __init__(self, keys):
        self.keys = keys

    def weights(self):
        return [1 / len(self.keys)] * len(self.keys)

    def update(self, groups):
        pass


class Learnability:
    def __init__(self, keys):
        mix = load_mix({"tasks": {key: {"task": "chain_sum"} for key in keys},
                        "sampler": {"strategy": "learnability"}})
        self.sampler = TaskSampler(mix)

    def weights(self):
        return self.sampler.weight_values()

    def update(self, groups):
        self.sampler.update(groups)


class SEC:
    def __init__(self, keys):
        self.keys, self.q = keys, {key: 0.0 for key in keys}

    def weights(self):
        top = max(self.q.values())
        raw = [math.exp((self.q[k] - top) / SEC_TAU) for k in self.keys]
        return [r / sum(raw) for r in raw]

    def update(self, groups):
        for key, task_groups in groups.items():
            reward = statistics.fmean(group_value(g, "advantage") for g in task_groups)
            self.q[key] += SEC_ALPHA * (reward - self.q[key])


def run(strategy: str, seed: int, target: float = TARGET) -> dict:
    keys = list(TASKS)
    rng = np.random.default_rng(seed)
    z = np.array([logit(TASKS[k]) for k in keys])
    chooser = {"uniform": Uniform, "learnability": Learnability, "sec": SEC}[strategy](keys)
    flat = total = 0
    reached = None
    for step in range(1, MAX_STEPS + 1):
        shares = np.array(chooser.weights())
        tasks = rng.choice(len(keys), size=PROMPTS, p=shares / shares.sum())
        p = 1 / (1 + np.exp(-z))
        scores = (rng.random((PROMPTS, GROUP)) < p[tasks, None]).astype(float)
        groups: dict[str, list[list[float]]] = {}
        for task, row in zip(tasks, scores):
            groups.setdefault(keys[task], []).append(row.tolist())
        for key, task_groups in groups.items():
            for g in task_groups:
                value = group_value(g, "advantage")
                flat += value == 0.0
                total += 1
                z[keys.index(key)] += LR * value
        chooser.update(groups)
        if reached is None and float(np.mean(1 / (1 + np.exp(-z)))) >= target:
            reached = step
            break
    return {"steps": reached or MAX_STEPS, "reached": reached is not None, "zero_variance_share": flat / total,
            "final_accuracy": {k: round(float(a), 3) for k, a in zip(keys, 1 / (1 + np.exp(-z)))}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--target", type=float, default=TARGET, help="mean accuracy over tasks to reach")
    parser.add_argument("--json", action="store_true", help="print the per-seed results as JSON too")
    args = parser.parse_args()
    start = time.perf_counter()
    results = {s: [run(s, seed, args.target) for seed in range(args.seeds)] for s in STRATEGIES}
    print(f"target mean accuracy {args.target} over {len(TASKS)} tasks (start {statistics.fmean(TASKS.values()):.3f}), "
          f"B={PROMPTS} prompts x G={GROUP}, LR={LR}, {args.seeds} seeds, cap {MAX_STEPS} steps")
    print(f"{'strategy':<14}{'steps mean':>11}{'sd':>7}{'median':>8}{'reached':>9}{'zero-var groups':>17}"
          f"{'vs uniform':>12}")
    base = statistics.fmean(r["steps"] for r in results["uniform"])
    for strategy, rows in results.items():
        steps = [r["steps"] for r in rows]
        sd = statistics.stdev(steps) if len(steps) > 1 else 0.0
        zero = statistics.fmean(r["zero_variance_share"] for r in rows)
        print(f"{strategy:<14}{statistics.fmean(steps):>11.1f}{sd:>7.1f}{statistics.median(steps):>8.0f}"
              f"{sum(r['reached'] for r in rows):>6}/{len(rows):<2}{zero:>17.3f}"
              f"{statistics.fmean(steps) / base:>11.2f}x")
    print(f"({time.perf_counter() - start:.1f} s)")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
