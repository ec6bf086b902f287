"""Real training, side by side: uniform task weights vs the learnability sampler, on CPU with SmolLM2-135M.

    python bench/bench_sampler_training.py                      # 2 runs x 12 steps of SmolLM2 on the CPU backend
    python bench/bench_sampler_training.py --steps 3 --model tiny   # plumbing check only

Both runs train the quickstart config (its CPU settings) on the same mix of learnable and far too hard tasks (written
to the work folder: the tasks of configs/mix/quickstart.yaml, which SmolLM2 answers right ~20% of the time, plus long
sums and long mixed-operation expressions of 3-4 digit numbers, which it never does), same seed, same batch; the second adds
`sampler: {strategy: learnability}`. verl's file logger (VERL_FILE_LOGGER_PATH) records every step's metrics; the
script prints, per step, env/zero_variance_groups of both runs and the learnability run's weights, then the share of
zero-variance groups over the steps of both and the relative reduction. The issue's target: >= 30% fewer zero-variance
groups at equal steps. Add `--dynamic-sampling` to compare with algorithm.filter_groups.enable=true (then the kept batch
has none; sampling/observed_zero_variance_groups counts every group generated, dropped ones included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
HARD = {"hard_sum": {"task": "chain_sum", "weight": 1.0,
                     "config": {"min_terms": 5, "max_terms": 6, "min_digits": 3, "max_digits": 4}},
        "hard_arithmetic": {"task": "basic_arithmetic", "weight": 1.0,
                            "config": {"min_terms": 4, "max_terms": 5, "min_digits": 3, "max_digits": 4}}}


def write_mixes(workdir: Path) -> dict[str, Path]:
    base = yaml.safe_load((REPO / "configs" / "mix" / "quickstart.yaml").read_text())
    tasks = {**base["tasks"], **HARD}
    paths = {}
    for name, extra in (("uniform", {}), ("learnability", {"sampler": {"strategy": "learnability"}})):
        paths[name] = workdir / f"mix_{name}.yaml"
        paths[name].write_text(yaml.safe_dump({"tasks": tasks, **extra}, sort_keys=False))
    return paths


def train(name: str, mix: Path, args: argparse.Namespace, workdir: Path) -> list[dict]:
    log = workdir / f"metrics_{name}.jsonl"
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", f"model={args.model}",
           f"env.mix={mix}", f"env.seed={args.seed}", "trainer.device=cpu",
           f"data.train_batch_size={args.prompts}", f"actor_rollout_ref.rollout.n={args.samples}",
           f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
           f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
           "trainer.val_before_train=false", "trainer.logger=[console,file]", f"trainer.experiment_name=sampler_{name}",
           f"trainer.default_local_dir={workdir / f'ckpt_{name}'}", f"hydra.run.dir={workdir / f'hydra_{name}'}"]
    if args.dynamic_sampling:
        cmd.append("algorithm.filter_groups.enable=true")
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               CUDA_VISIBLE_DEVICES="")
    start = time.perf_counter()
    print(f"{name}: {' '.join(cmd)}", file=sys.stderr)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{name} run failed:\n{(done.stdout + done.stderr)[-5000:]}")
    print(f"{name}: {args.steps} steps in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return [json.loads(line)["data"] for line in log.read_text().splitlines() if "env/zero_variance_groups" in line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dynamic-sampling", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs and checkpoints here (default: temp)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_sampler_"))
    workdir.mkdir(parents=True, exist_ok=True)
    mixes = write_mixes(workdir)
    runs = {name: train(name, path, args, workdir) for name, path in mixes.items()}
    key = "sampling/observed_zero_variance_groups" if args.dynamic_sampling else "env/zero_variance_groups"
    tasks = sorted(k.split("/")[1] for k in runs["learnability"][0] if k.startswith("sampling/") and k.endswith("/weight"))
    print(f"step  {key}: uniform  learnability   learnability weights ({', '.join(tasks)})")
    steps = min(len(r) for r in runs.values())
    for i in range(steps):
        u, s = runs["uniform"][i], runs["learnability"][i]
        weights = " ".join(f"{s.get(f'sampling/{t}/weight', float('nan')):.2f}" for t in tasks)
        print(f"{i + 1:>4}  {u.get(key, float('nan')):>8.3f}  {s.get(key, float('nan')):>12.3f}   {weights}")
    mean = {name: statistics.fmean(r[i].get(key, 0.0) for i in range(steps)) for name, r in runs.items()}
    reduction = 1 - mean["learnability"] / mean["uniform"] if mean["uniform"] else float("nan")
    print(f"mean over {steps} steps: uniform {mean['uniform']:.3f}, learnability {mean['learnability']:.3f}: "
          f"{reduction:.0%} fewer zero-variance groups (target >= 30%); logs in {workdir}")


if __name__ == "__main__":
    main()
