"""Real training, side by side: uniform task weights vs the learnability sampler, on CPU with SmolLM2-135M.

    python bench/bench_sampler_training.py --steps 16 --seeds 0 1 2 --workdir /tmp/sampler_bench   # 6 runs, ~85 min
    python bench/bench_sampler_training.py --steps 3 --model tiny                                 # plumbing check only

Both arms train the quickstart config (its CPU settings) on the same mix of learnable and far too hard tasks (written
to the work folder: the tasks of configs/mix/quickstart.yaml, which SmolLM2 answers right ~20% of the time, plus long
sums and long mixed-operation expressions of 3-4 digit numbers, which it never does), same seed, same batch; the second
adds `sampler: {strategy: learnability}` at its default settings. verl's file logger (VERL_FILE_LOGGER_PATH) records
every step's metrics. Per seed the script prints, per step, env/zero_variance_groups and the mean reward
(critic/score/mean) of both arms and the learnability arm's weights; then the share of zero-variance groups over all
steps of both arms and the relative reduction (the issue's target: >= 30% fewer at equal steps), per seed and pooled.
It also counts, per task, the groups whose scores are all equal in both arms' generation dumps (env.dump: a few whole
groups a step) and says how few zero-variance groups any reweighting of this mix could reach at those rates (every
group beyond the floors on the task with the fewest). It draws both arms' zero-variance share per step and the
learnability arm's weights to `<workdir>/sampler_training.png` and writes the numbers to `<workdir>/summary.json`.
No task is far too easy for SmolLM2 at temperature 1 (it gets 21% of "State the final answer ...: 4821 =" right;
BENCHMARKS.md), so this mix's flat groups are all-wrong ones.

Runs are kept: an arm whose metrics file in `<workdir>/seed<S>/` already holds the asked steps is read, not re-run, so
an interrupted comparison resumes where it stopped (an arm takes 12-15 min for 16 steps on 2 cores; two Ray runs side
by side do not fit 24 GiB, so arms run one after another). Add `--dynamic-sampling` to compare with
algorithm.filter_groups.enable=true (then the kept batch has none; sampling/observed_zero_variance_groups counts every
group generated, dropped ones included).
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
sys.path.insert(0, str(REPO))

from envs.mix import Mix, load_mix  # noqa: E402
from envs.sampler import floored_shares, group_value  # noqa: E402
from training.report.report import write_atomic  # noqa: E402
from utils.generation_viewer import read_jsonl  # noqa: E402

ARMS = ("uniform", "learnability")
HARD = {"hard_sum": {"task": "chain_sum", "weight": 1.0,
                     "config": {"min_terms": 5, "max_terms": 6, "min_digits": 3, "max_digits": 4}},
        "hard_arithmetic": {"task": "basic_arithmetic", "weight": 1.0,
                            "config": {"min_terms": 4, "max_terms": 5, "min_digits": 3, "max_digits": 4}}}
REWARD = "critic/score/mean"


def write_mixes(workdir: Path) -> dict[str, Path]:
    base = yaml.safe_load((REPO / "configs" / "mix" / "quickstart.yaml").read_text())
    tasks = {**base["tasks"], **HARD}
    paths = {}
    for name, extra in zip(ARMS, ({}, {"sampler": {"strategy": "learnability"}})):
        paths[name] = workdir / f"mix_{name}.yaml"
        paths[name].write_text(yaml.safe_dump({"tasks": tasks, **extra}, sort_keys=False))
    return paths


def read_steps(log: Path) -> list[dict]:
    """The per-step metric dicts of a run's file logger (empty when there is no log yet)."""
    if not log.exists():
        return []
    return [r["data"] for r in read_jsonl(log) if "env/zero_variance_groups" in r.get("data", {})]


def train(name: str, mix: Path, seed: int, args: argparse.Namespace, workdir: Path) -> list[dict]:
    """Runs one arm (or reads it back when its log already holds args.steps steps); returns its per-step metrics."""
    log = workdir / f"metrics_{name}.jsonl"
    done_steps = read_steps(log)
    if len(done_steps) >= args.steps:
        print(f"seed {seed} {name}: reusing the {args.steps} steps logged in {log}", file=sys.stderr)
        return done_steps[:args.steps]
    log.unlink(missing_ok=True)  # an unfinished run starts over: its steps would not be the same run's
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", f"model={args.model}",
           f"env.mix={mix}", f"env.seed={seed}", "trainer.device=cpu",
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
    print(f"seed {seed} {name}: {' '.join(cmd)}", file=sys.stderr)
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"seed {seed} {name} run failed:\n{(done.stdout + done.stderr)[-5000:]}")
    print(f"seed {seed} {name}: {args.steps} steps in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return read_steps(log)


def compare(seed: int, runs: dict[str, list[dict]], key: str) -> dict:
    """Prints one seed's per-step table; returns its per-step series and means."""
    tasks = sorted(k.split("/")[1] for k in runs["learnability"][0]
                   if k.startswith("sampling/") and k.endswith("/weight"))
    steps = min(len(r) for r in runs.values())
    series = {name: [r[i].get(key, float("nan")) for i in range(steps)] for name, r in runs.items()}
    rewards = {name: [r[i].get(REWARD, float("nan")) for i in range(steps)] for name, r in runs.items()}
    weights = {t: [runs["learnability"][i].get(f"sampling/{t}/weight", float("nan")) for i in range(steps)]
               for t in tasks}
    print(f"\nseed {seed}\nstep  {key}: uniform  learnability   reward: uniform  learnability   "
          f"learnability weights ({', '.join(tasks)})")
    for i in range(steps):
        print(f"{i + 1:>4}  {series['uniform'][i]:>8.3f}  {series['learnability'][i]:>12.3f}   "
              f"{rewards['uniform'][i]:>15.3f}  {rewards['learnability'][i]:>12.3f}   "
              + " ".join(f"{weights[t][i]:.2f}" for t in tasks))
    mean = {name: statistics.fmean(s) for name, s in series.items()}
    reduction = 1 - mean["learnability"] / mean["uniform"] if mean["uniform"] else float("nan")
    print(f"seed {seed}, mean over {steps} steps: uniform {mean['uniform']:.3f}, learnability "
          f"{mean['learnability']:.3f}: {reduction:.0%} fewer zero-variance groups; mean reward uniform "
          f"{statistics.fmean(rewards['uniform']):.3f}, learnability {statistics.fmean(rewards['learnability']):.3f}")
    return {"seed": seed, "steps": steps, "zero_variance": series, "reward": rewards, "weights": weights,
            "mean_zero_variance": mean, "reduction": reduction}


def flat_rates(folder: Path) -> dict[str, tuple[int, int]]:
    """{task: (flat groups, groups)} over both arms' generation dumps (a few whole groups a step, env.dump)."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for name in ARMS:
        for path in sorted((folder / f"ckpt_{name}" / "generations" / "train").glob("[0-9]*.jsonl")):
            for row in read_jsonl(path):
                groups.setdefault((name, row["task"], row["group"]), []).append(float(row["score"]))
    counts: dict[str, tuple[int, int]] = {}
    for (_, task, _), scores in groups.items():
        flat, total = counts.get(task, (0, 0))
        counts[task] = (flat + (group_value(scores, "variance") == 0.0), total + 1)  # the sampler's own rule
    return dict(sorted(counts.items()))


def best_possible(rates: dict[str, float], mix: Mix) -> float:
    """The zero-variance share if every group beyond the sampler's floors came from the task with the lowest rate:
    what no reweighting of this mix can beat, given the tasks' own shares of flat groups."""
    total = sum(spec.weight for spec in mix.tasks)
    floor = mix.sampler.floor
    best = min(mix.keys, key=lambda k: rates[k])
    shares = floored_shares([1.0 if k == best else 0.0 for k in mix.keys],
                            [floor * spec.weight / total for spec in mix.tasks])
    return sum(share * rates[k] for share, k in zip(shares, mix.keys))


def plot(results: list[dict], key: str, path: Path) -> None:
    """Zero-variance share per step of both arms (every seed) and the learnability arm's weights (first seed)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    zero, share = fig.subplots(1, 2)
    for r in results:
        for name, color in zip(ARMS, ("tab:gray", "tab:blue")):
            ys = r["zero_variance"][name]
            zero.plot(range(1, len(ys) + 1), ys, color=color, marker="o", alpha=0.8,
                      label=f"{name} (seed {r['seed']}): mean {r['mean_zero_variance'][name]:.2f}")
    zero.set(title=f"{key} per step", xlabel="step", ylabel="share of groups", ylim=(-0.05, 1.05))
    zero.legend(fontsize=8)
    first = results[0]
    for task, ys in first["weights"].items():
        share.plot(range(1, len(ys) + 1), ys, marker=".", label=task)
    share.set(title=f"learnability arm's task weights after each step (seed {first['seed']})", xlabel="step",
              ylabel="share of the stream", ylim=(0, 1))
    share.legend(fontsize=8)
    write_atomic(path, lambda tmp: fig.savefig(tmp, format="png"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dynamic-sampling", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None, help="keep (and reuse) logs here (default: temp)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_sampler_"))
    key = "sampling/observed_zero_variance_groups" if args.dynamic_sampling else "env/zero_variance_groups"
    results = []
    for seed in args.seeds:
        folder = workdir / f"seed{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        mixes = write_mixes(folder)
        runs = {name: train(name, mixes[name], seed, args, folder) for name in ARMS}
        results.append(compare(seed, runs, key) | {"flat_groups": flat_rates(folder)})
    pooled = {name: statistics.fmean(x for r in results for x in r["zero_variance"][name]) for name in ARMS}
    reduction = 1 - pooled["learnability"] / pooled["uniform"] if pooled["uniform"] else float("nan")
    print(f"\nall seeds ({', '.join(map(str, args.seeds))}), {args.steps} steps each: zero-variance groups uniform "
          f"{pooled['uniform']:.3f}, learnability {pooled['learnability']:.3f}: {reduction:.0%} fewer "
          f"(target >= 30%); logs in {workdir}")
    counts = {t: [sum(r["flat_groups"].get(t, (0, 0))[i] for r in results) for i in (0, 1)]
              for t in sorted({t for r in results for t in r["flat_groups"]})}
    rates = {t: flat / total for t, (flat, total) in counts.items() if total}
    print("share of flat groups per task (both arms' generation dumps): "
          + ", ".join(f"{t} {rates[t]:.2f} ({flat}/{total})" for t, (flat, total) in counts.items() if total))
    ceiling = None
    mix = load_mix(workdir / f"seed{args.seeds[0]}" / "mix_learnability.yaml")
    if set(rates) == set(mix.keys):
        floor_share = best_possible(rates, mix)
        ceiling = 1 - floor_share / pooled["uniform"]
        print(f"best any reweighting could do with these rates and the floors: {floor_share:.3f} zero-variance groups, "
              f"{ceiling:.0%} fewer than uniform's measured {pooled['uniform']:.3f}")
    summary = {"args": {k: str(v) for k, v in vars(args).items()}, "key": key, "pooled": pooled,
               "reduction": reduction, "flat_groups_per_task": counts, "best_possible_reduction": ceiling,
               "seeds": results}
    write_atomic(workdir / "summary.json", lambda tmp: tmp.write_text(json.dumps(summary, indent=1)))
    plot(results, key, workdir / "sampler_training.png")
    print(f"figure: {workdir / 'sampler_training.png'}")


if __name__ == "__main__":
    main()
