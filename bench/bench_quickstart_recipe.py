"""Does a quickstart recipe learn on every seed? Trains it per seed, then judges it as `make quickstart` does.

    python bench/bench_quickstart_recipe.py --recipe shipped --seeds 0 1 2 3 4 --workdir /tmp/recipes
    python bench/bench_quickstart_recipe.py --recipe cutzero --seeds 0 1 --workdir /tmp/recipes
    python bench/bench_quickstart_recipe.py --recipe mine:actor_rollout_ref.actor.optim.lr=2e-5 --seeds 0 \
        --workdir /tmp/recipes

A recipe is a name from RECIPES or `NAME:KEY=VALUE,KEY=VALUE` (hydra overrides of configs/quickstart.yaml; the
command line wins over env.on_cpu). For each seed: `training/train_grpo.py --config-name quickstart env.seed=S` on
the CPU backend, then `python -m training.pipeline ... --eval-override "decoding=[greedy]"`, the held-out comparison
`make quickstart` prints: configs/eval/quickstart.yaml unchanged (its size and decoding fixed), scored as the run
scores. The base model's evaluation is cached after its first run, so later seeds pay only the trained one.
Each seed's verdict (overall and per group, with the paired 95% interval), its times and the commands go to
`<workdir>/results.jsonl`; a seed already judged there is read, not re-run, so an interrupted sweep resumes. Prints a
markdown table of every (recipe, seed) in the file. Runs one after another: a CPU training run uses both cores.

`--also-at 10 15` also judges each seed's checkpoint at those steps (the run saves at their greatest common divisor
with its length), as the recipe stopped there would be judged: the same stream, seeds and constant step size, so the
run up to step K is the K-step run (recorded as `NAME@K`, its training time the launch's to the end of step K).
One training run then answers how many steps a recipe needs.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from evaluation.compare import interval_text, load_comparisons, verdict  # noqa: E402
from training.report.verdict import decided, verdict_sentence  # noqa: E402

def run_length(steps: int) -> list[str]:
    """Overrides that train `steps` steps with one checkpoint and one validation, at the end."""
    return [f"trainer.total_training_steps={steps}", f"trainer.save_freq={steps}", f"trainer.test_freq={steps}"]


# Recipes measured (BENCHMARKS.md, "Learning"), each spelled out over the CPU quickstart as it is now
# (configs/quickstart.yaml: sums and differences, 16 prompts x 4 samples x 32 tokens, cut responses scored 0, 10 steps
# at lr 3e-5), so that any of them runs again as it was measured. LETTERS is the earlier quickstart (sums,
# differences and letter counts, 4 prompts x 8 samples x 48 tokens, cut responses scored as they are); the quickstart
# trained ten steps until "steps20" was shipped, and the recipes measured then name their ten steps; it trained twenty
# until "skip10", and LETTERS and ARITH name them. ARITH is the sums and differences from 8 prompts x 4 samples (the
# same 32 sequences a step as LETTERS).
TEN_STEPS = run_length(10)
TWENTY_STEPS = ["trainer.total_training_steps=20", "trainer.save_freq=20"]
BEYOND = "beyond prior"  # the row of the tasks no answer repeated can carry, which the verdict decides on
AS_IS = ["env.reward.truncated=as_is", "data.max_response_length=48"]
# every recipe below was measured with base GRPO's entropy bonus, which the quickstart had until issue 67
ENTROPY = "actor_rollout_ref.actor.entropy_coeff=0.001"
LETTERS_MIX = REPO / "bench" / "recipes" / "quickstart_letters.yaml"  # the earlier quickstart's mix
LETTERS = [f"env.mix={LETTERS_MIX}", *TWENTY_STEPS, *AS_IS, ENTROPY, "data.train_batch_size=4",
           "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=8"]
ARITH = [*TWENTY_STEPS, *AS_IS, ENTROPY, "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
         "actor_rollout_ref.rollout.n=4"]
CUT_ZERO = "env.reward.truncated=zero"  # a response cut at max_response_length scores 0 (its accuracy still counts)
PROMPTS16 = ["data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=16"]  # one update of 16 prompts
# 16 x 4 x 32 tokens, cut responses scored 0, no entropy bonus (so that the update leaves out zero-advantage groups)
SKIP = [*ARITH, CUT_ZERO, *PROMPTS16, "data.max_response_length=32", "actor_rollout_ref.actor.entropy_coeff=0"]
RECIPES: dict[str, list[str]] = {
    "shipped": [],  # configs/quickstart.yaml as it is now: skip10
    # the quickstart until issue 35: lr 1e-5 (ten CPU steps moved held-out greedy accuracy by a few points either way)
    "lr1e-5": [*LETTERS, "actor_rollout_ref.actor.optim.lr=1e-5", *TEN_STEPS],
    # the same 32 responses a step from 8 prompts x 4 samples instead of 4 x 8: twice the questions per gradient
    "wide": [*LETTERS, "actor_rollout_ref.actor.optim.lr=1e-5", "data.train_batch_size=8",
             "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=4", *TEN_STEPS],
    # three times the step size (4 of 5 seeds)
    "lr3x": [*LETTERS, "actor_rollout_ref.actor.optim.lr=3e-5", *TEN_STEPS],
    # lr3x trained on the judge's own correctness: Reasoning Gym's default score_answer pays len(gold)/len(answer) for
    # an answer that contains the gold, so partial credit paid the hedge "1.1" a third for every gold "1" (lr3x seed 4
    # answered it to 144 of 150 letter counts) while the held-out accuracy counts it wrong (4 of 5 seeds)
    "binary": [*LETTERS, "actor_rollout_ref.actor.optim.lr=3e-5", "env.reward.partial_credit=false", *TEN_STEPS],
    # lr3x for twice the steps (40 prompts seen -> 80): the earlier quickstart (5 of 5 seeds better
    # overall, 2 of 5 beyond the answer prior)
    "steps20": LETTERS,
    # each update from 16 prompts (4x the step time): seeds 3 and 4 helped beyond the prior
    "prompts16": [*LETTERS, *PROMPTS16],
    # twice the response budget (seed 3: hurt beyond the prior)
    "len96": [*LETTERS, "data.max_response_length=96"],
    # no letter counts, whose gold "1" on 83% of items the quickstart learned to give
    "arith": ARITH,
    "arith30": [*ARITH, "trainer.total_training_steps=30", "trainer.save_freq=30"],
    "cutzero": [*ARITH, CUT_ZERO],
    "cutzero16x4": [*ARITH, CUT_ZERO, *PROMPTS16],
    # cutzero16x4 with 32 response tokens (the evaluation's budget follows the run's): the quickstart now
    "cut32_16x4": [*ARITH, CUT_ZERO, *PROMPTS16, "data.max_response_length=32"],
    # cut32_16x4 without the entropy bonus, so that the update leaves out zero-advantage groups (7 of 7 seeds)
    "skip32_16x4": SKIP,
    # skip32_16x4 for ten steps (7 of 7 seeds, as much beyond the prior as twenty on average): the quickstart now
    "skip10": [*SKIP, "trainer.total_training_steps=10", "trainer.save_freq=10"],
}


def parse_recipe(text: str) -> tuple[str, list[str]]:
    """Returns (name, overrides) for a RECIPES name or `NAME:KEY=VALUE,...`."""
    if ":" in text:
        name, _, body = text.partition(":")
        overrides = [part for part in body.split(",") if part]
        bad = [part for part in overrides if "=" not in part]
        if not name or bad:
            raise SystemExit(f"--recipe {text!r}: write NAME:KEY=VALUE,KEY=VALUE (bad part: {bad or [text]})")
        return name, overrides
    if text not in RECIPES:
        raise SystemExit(f"--recipe {text!r}: not one of {sorted(RECIPES)}; or write NAME:KEY=VALUE,KEY=VALUE")
    return text, list(RECIPES[text])


def run_logged(cmd: list[str], log: Path) -> float:
    """Runs `cmd` from the repository root with its output in `log`; returns its seconds; stops the sweep on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.time()
    with open(log, "w") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        code = subprocess.call(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    if code:
        raise SystemExit(f"{cmd[1]} exited {code}: see {log}")
    return time.time() - start


def cpu_quickstart(overrides: list[str]):
    """The quickstart config as a CPU run composes it: env.on_cpu applied, the command line winning over it."""
    from training.launch.config import compose_config
    from training.launch.hardware import apply_cpu_overrides

    cfg = compose_config("quickstart", overrides)
    apply_cpu_overrides(cfg, {o.split("=", 1)[0] for o in overrides})
    return cfg


def saving_at(overrides: list[str], steps: list[int]) -> list[str]:
    """The overrides with trainer.save_freq set so that the run keeps a checkpoint at each of `steps` and its last."""
    if not steps:
        return overrides
    length = int(cpu_quickstart(overrides).trainer.total_training_steps)
    bad = [k for k in steps if not 0 < k < length]
    if bad:
        raise SystemExit(f"--also-at {bad}: each step must be inside the run's {length} steps")
    every = math.gcd(length, *steps)
    return [*[o for o in overrides if not o.startswith("trainer.save_freq=")], f"trainer.save_freq={every}"]


def stopped_at(run: Path, step: int) -> Path:
    """A view of the run folder as if training had stopped after `step`: links to all it holds but the later
    checkpoints and the held-out folders, its latest-checkpoint marker `step`."""
    view = run / f"at_step{step}"
    view.mkdir(exist_ok=True)
    for entry in run.iterdir():
        later = entry.name.startswith("global_step_") and int(entry.name.split("_")[-1]) > step
        skipped = later or entry.name.startswith(("heldout", "at_step", "latest_checkpointed_iteration"))
        if not skipped and not (view / entry.name).exists():
            (view / entry.name).symlink_to(entry)
    (view / "latest_checkpointed_iteration.txt").write_text(f"{step}\n")
    return view


def step_end_seconds(run: Path, step: int, launched: float) -> float:
    """Seconds from the launch to the end of `step`, from the run's progress events."""
    for line in (run / "logs" / "progress.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("kind") == "step" and event.get("step") == step:
            return event["time"] - launched
    raise SystemExit(f"{run}: no step {step} in logs/progress.jsonl")


def judge(name: str, overrides: list[str], seed: int, run: Path, heldout: Path, log: Path, train_cmd: list[str],
          train_s: float) -> dict:
    """Compares the latest checkpoint of the run folder `run` with the base model; returns a results.jsonl record."""
    judge_cmd = [sys.executable, "-m", "training.pipeline", "--config-name", "quickstart", "--trained", str(run),
                 "--run-dir", str(heldout), "--eval-override", "decoding=[greedy]"]
    judge_s = run_logged(judge_cmd, log)
    cmps = load_comparisons(str(heldout / "eval" / "compare"))
    _, cmp = decided(cmps)  # the comparison the verdict reads
    rows = {row["key"]: row for row in [*cmp["groups"], cmp["overall"]]}
    if (cmp.get("beyond_prior") or {}).get("ci95"):  # the pool the verdict decides on (evaluation/compare.py)
        rows[BEYOND] = cmp["beyond_prior"]
    return {"recipe": name, "overrides": overrides, "seed": seed, "train_seconds": round(train_s, 1),
            "judge_seconds": round(judge_s, 1), "commands": [" ".join(train_cmd), " ".join(judge_cmd)],
            "rows": {key: {k: row.get(k) for k in ("base", "trained", "paired_delta", "ci95", "verdict")}
                     for key, row in rows.items()},
            "verdict": verdict_sentence(cmps)}


def judge_seed(name: str, overrides: list[str], seed: int, workdir: Path, also_at: list[int] = ()) -> list[dict]:
    """Trains one seed of a recipe and compares it with the base model at its end and at each step of `also_at`;
    returns their results.jsonl records, the end's first."""
    run = workdir / name / f"seed{seed}"
    train_cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", "trainer.device=cpu",
                 f"env.seed={seed}", f"trainer.default_local_dir={run}", *saving_at(overrides, list(also_at))]
    train_log = workdir / name / f"seed{seed}.train.log"
    print(f"[recipe] {name} seed {seed}: training ({train_log})", flush=True)
    launched = time.time()
    train_s = run_logged(train_cmd, train_log)
    print(f"[recipe] {name} seed {seed}: trained in {train_s:.0f} s; held-out comparison", flush=True)
    records = [judge(name, overrides, seed, run, run / "heldout", workdir / name / f"seed{seed}.judge.log", train_cmd,
                     train_s)]
    for step in also_at:
        print(f"[recipe] {name} seed {seed}: held-out comparison at step {step}", flush=True)
        records.append(judge(f"{name}@{step}", overrides, seed, stopped_at(run, step), run / f"heldout_step{step}",
                             workdir / name / f"seed{seed}.judge{step}.log", train_cmd,
                             step_end_seconds(run, step, launched)))
    return records


def cell(row: dict | None) -> str:
    if row is None:  # a record written before the verdict decided beyond the prior
        return "-"
    said = row.get("verdict") or verdict(row["ci95"])
    return f"{row['base']:.3f} -> {row['trained']:.3f}, {row['paired_delta']:+.3f} {interval_text(row)} {said}"


def table(records: list[dict]) -> str:
    lines = ["| recipe | env.seed | training | held-out comparison | in_mix | probe | overall | beyond prior | verdict |",
             "|---|---:|---:|---:|---|---|---|---|---|"]
    for r in records:
        rows = r["rows"]
        said = r.get("verdict", "").split(":")[0] or "-"  # "Training helped", "Not resolved beyond an answer prior"
        lines.append(f"| {r['recipe']} | {r['seed']} | {r['train_seconds']:.0f} s | {r['judge_seconds']:.0f} s | "
                     f"{cell(rows['in_mix'])} | {cell(rows['probe'])} | {cell(rows['overall'])} | "
                     f"{cell(rows.get(BEYOND))} | {said} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True, help="a name from RECIPES, or NAME:KEY=VALUE,KEY=VALUE")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--also-at", type=int, nargs="*", default=[],
                        help="steps whose checkpoint is judged too, as if the run had stopped there")
    args = parser.parse_args()
    name, overrides = parse_recipe(args.recipe)
    results = args.workdir / "results.jsonl"
    args.workdir.mkdir(parents=True, exist_ok=True)
    done = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    for seed in args.seeds:
        names = [name, *(f"{name}@{step}" for step in args.also_at)]
        if all(any(r["recipe"] == n and r["seed"] == seed for r in done) for n in names):
            print(f"[recipe] {name} seed {seed}: judged already ({results})")
            continue
        for record in judge_seed(name, overrides, seed, args.workdir.resolve(), args.also_at):
            with open(results, "a") as out:  # a line per judgement: a killed sweep loses at most the seed it ran
                out.write(json.dumps(record) + "\n")
            done.append(record)
            print(f"[recipe] {record['recipe']} seed {seed}: beyond prior {cell(record['rows'].get(BEYOND))}",
                  flush=True)
    print(table(done))


if __name__ == "__main__":
    main()
