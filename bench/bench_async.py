"""Sync against async mode on the CPU, at the same prompts, samples and steps: step time, what async carried over,
and the held-out verdict of each.

    python bench/bench_async.py --workdir /tmp/async                      # 128-token responses, seed 0, 20 steps
    python bench/bench_async.py --workdir /tmp/async --length 256 --seed 1

Both arms are the CPU quickstart (configs/quickstart.yaml: SmolLM2-135M, one-digit sums and differences, 16 prompts
x 4 samples, lr 3e-5, a cut response scored 0) with room for `--length` response tokens, where SmolLM2's responses
run long-tailed (some stop in 10 tokens, others run to the limit); one arm adds
`trainer.v1.trainer_mode=reasoning_gym` (verl's sync trainer: a step waits for its longest response), the other
`reasoning_gym_async` (verl's colocated async trainer: a step takes the first 16 groups that finish, the rest are
paused and continue under the new weights). Each arm trains and is judged as bench/bench_quickstart_recipe.py does
(`judge_seed`: the held-out comparison `make quickstart` prints, the base model's evaluation cached and shared).
They run one after the other (a CPU run uses both cores), sync first.

From each run's `logs/metrics.jsonl`: verl's `timing_s/step`, `gen` and `update_actor`, the mean response length and
the share cut at the limit, and in async mode `async/carried_over` (responses begun under older weights),
`async/resumed` (continued across an update) and verl's worst staleness. Step 1 is shown apart (start-up work, and
async's first step samples two batches); "mean step" is steps 2..N with a bootstrap 95% interval, and the ratio's
interval resamples both arms' steps. Each arm's record goes to `<workdir>/results.jsonl` as it ends (a finished arm
is read, not re-run); `<workdir>/async.md` is the table, `<workdir>/async.png` the steps drawn.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/bench_async.py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))

from bench.bench_quickstart_recipe import BEYOND, cell, judge_seed, run_length  # noqa: E402
from evaluation.metrics import bootstrap_ci  # noqa: E402
from utils.metrics_file import read_metrics  # noqa: E402

MODES = {"sync": "reasoning_gym", "async": "reasoning_gym_async"}
# per step: (column, metrics.jsonl key)
SERIES = (("step_s", "timing_s/step"), ("gen_s", "timing_s/gen"), ("update_s", "timing_s/update_actor"),
          ("response_tokens", "response_length/mean"), ("cut_share", "response_length/clip_ratio"),
          ("carried_over", "async/carried_over"), ("resumed", "async/resumed"),
          ("staleness_max", "training/off_policy/trajectory_staleness_worst/max"))


def arm_overrides(mode: str, length: int, steps: int) -> list[str]:
    """The hydra overrides of one arm over the CPU quickstart."""
    return [f"trainer.v1.trainer_mode={MODES[mode]}", f"data.max_response_length={length}", *run_length(steps)]


def step_series(metrics: dict[int, dict[str, float]]) -> dict[str, list[float | None]]:
    """{column: one value per step, in step order} of SERIES from a run's metrics.jsonl ({step: data})."""
    steps = sorted(metrics)
    return {"step": steps, **{name: [metrics[s].get(key) for s in steps] for name, key in SERIES}}


def mean_interval(values: list[float]) -> dict:
    """Mean of steps 2..N and its bootstrap 95% interval."""
    lo, hi = bootstrap_ci(values)
    return {"mean": statistics.fmean(values), "ci95": [lo, hi]}


def ratio_interval(numerator: list[float], denominator: list[float], resamples: int = 2000, seed: int = 0
                   ) -> tuple[float, float, float]:
    """(ratio of means, 2.5th, 97.5th percentile): each arm's steps resampled on their own (they are not paired)."""
    rng = random.Random(seed)
    ratios = sorted(statistics.fmean(rng.choices(numerator, k=len(numerator)))
                    / statistics.fmean(rng.choices(denominator, k=len(denominator))) for _ in range(resamples))
    return (statistics.fmean(numerator) / statistics.fmean(denominator), ratios[int(0.025 * (resamples - 1))],
            ratios[int(0.975 * (resamples - 1))])


def run_arm(mode: str, length: int, seed: int, steps: int, workdir: Path) -> dict:
    """Trains and judges one arm; returns its record: judge_seed's, plus the per-step series."""
    name = f"{mode}{length}"
    record = judge_seed(name, arm_overrides(mode, length, steps), seed, workdir)
    record.update(mode=mode, length=length, series=step_series(read_metrics(workdir / name / f"seed{seed}" / "logs")))
    return record


def summary(record: dict) -> dict:
    """An arm's numbers for the table: steps 2..N (step 1 apart)."""
    series = record["series"]
    later = slice(1, None)
    known = lambda name: [v for v in series[name][later] if v is not None]  # noqa: E731
    out = {"step1_s": series["step_s"][0], "step": mean_interval(known("step_s")),
           "gen_s": statistics.fmean(known("gen_s")), "update_s": statistics.fmean(known("update_s")),
           "response_tokens": statistics.fmean(known("response_tokens")),
           "cut_share": statistics.fmean(known("cut_share")), "steps": len(series["step"])}
    if known("carried_over"):
        out.update(carried_over=statistics.fmean(known("carried_over")), resumed=statistics.fmean(known("resumed")),
                   staleness_max=max(known("staleness_max") or [0]))
    return out


def table(records: list[dict]) -> str:
    """Markdown: one row per arm, then the async/sync ratio of the mean step where both arms of a length ran."""
    lines = ["| arm | steps | training | step 1 | mean step 2..N [95%] | generation | update | response tokens "
             "(cut) | carried over (resumed, staleness <=) | beyond prior | verdict |",
             "|---|---:|---:|---:|---|---:|---:|---|---|---|---|"]
    for r in records:
        s = summary(r)
        lo, hi = s["step"]["ci95"]
        carried = (f"{s['carried_over']:.0%} ({s['resumed']:.0%}, {s['staleness_max']:.0f})"
                   if "carried_over" in s else "-")
        lines.append(f"| {r['mode']} {r['length']} tok, seed {r['seed']} | {s['steps']} | {r['train_seconds']:.0f} s "
                     f"| {s['step1_s']:.1f} s | {s['step']['mean']:.1f} s [{lo:.1f}, {hi:.1f}] | {s['gen_s']:.1f} s | "
                     f"{s['update_s']:.1f} s | {s['response_tokens']:.1f} ({s['cut_share']:.0%}) | {carried} | "
                     f"{cell(r['rows'].get(BEYOND))} | {r['verdict'].split(':')[0]} |")
    by_arm = {(r["mode"], r["length"], r["seed"]): r for r in records}
    for (mode, length, seed), r in by_arm.items():
        sync = by_arm.get(("sync", length, seed))
        if mode == "async" and sync:
            ratio, lo, hi = ratio_interval(r["series"]["step_s"][1:], sync["series"]["step_s"][1:])
            lines.append(f"\nasync / sync mean step at {length} tokens, seed {seed}: {ratio:.2f}x [{lo:.2f}, "
                         f"{hi:.2f}]; training wall time {r['train_seconds'] / sync['train_seconds']:.2f}x")
    return "\n".join(lines)


def plot(records: list[dict], path: Path) -> None:
    """Step time and mean response length per step, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (time_ax, length_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    for r in records:
        label = f"{r['mode']} {r['length']} tok, seed {r['seed']}"
        time_ax.plot(r["series"]["step"], r["series"]["step_s"], marker="o", ms=3, label=label)
        length_ax.plot(r["series"]["step"], r["series"]["response_tokens"], marker="o", ms=3, label=label)
    time_ax.set(xlabel="step", ylabel="seconds (timing_s/step)", title="step time")
    length_ax.set(xlabel="step", ylabel="tokens", title="mean response length")
    time_ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--length", type=int, default=128, help="data.max_response_length of both arms")
    parser.add_argument("--seed", type=int, default=0, help="env.seed of both arms")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--arms", nargs="+", choices=sorted(MODES), default=["sync", "async"])
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    results = workdir / "results.jsonl"
    done = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    for mode in args.arms:
        if any((r["mode"], r["length"], r["seed"]) == (mode, args.length, args.seed) for r in done):
            print(f"[async] {mode} {args.length} tok seed {args.seed}: done already ({results})")
            continue
        record = run_arm(mode, args.length, args.seed, args.steps, workdir)
        with open(results, "a") as out:  # one line per arm: a killed comparison loses at most the arm it ran
            out.write(json.dumps(record) + "\n")
        done.append(record)
    text = table(done)
    (workdir / "async.md").write_text(text + "\n")
    plot(done, workdir / "async.png")
    print(text)
    print(f"[async] table {workdir / 'async.md'}, steps drawn {workdir / 'async.png'}")


if __name__ == "__main__":
    main()
