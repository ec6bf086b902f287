"""Where a GRPO step's time goes on the CPU backend, as verl reports it, and our share of it.

    python bench/bench_cpu_step.py --ranks 1 2 --steps 5 [--model tiny] [--write-md]

Runs `training/train_grpo.py` (quickstart config, the tiny model by default) for `--steps` steps per rank count,
reads verl's per-step metrics from its file logger (VERL_FILE_LOGGER_PATH) and tabulates, per step:
verl's phases (gen, old_log_prob, ref, update_actor, update_weights, step) and ours: timing/data (the trainer waiting
on the task stream), timing_s/env_feedback (reading the step's scores and feeding metrics/curriculum) and
timing/score_max (the slowest response's time inside our reward function). Our share of the step:
(data + env_feedback + score_max) / step. Target: <= 1%, the first step included. Also shown: timing/reward_max, the
slowest response's scoring as verl's agent loop times it (verl's reward-loop worker, Ray hops and queueing around
our function); the CPU rollout finishes a batch's responses together, so it is about what the reward adds to the
step's wall time, and a conservative share counts it instead of score_max.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERL_PHASES = ["gen", "old_log_prob", "ref", "update_actor", "update_weights"]


def run(ranks: int, steps: int, args: argparse.Namespace, workdir: Path) -> list[dict]:
    """Trains `steps` steps on `ranks` CPU ranks; returns verl's logged metrics per step."""
    log = workdir / f"metrics_{ranks}.jsonl"
    prompts = args.prompts
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", f"model={args.model}",
           "trainer.device=cpu", f"trainer.n_gpus_per_node={ranks}", f"data.train_batch_size={prompts}",
           f"actor_rollout_ref.rollout.n={args.samples}", f"actor_rollout_ref.actor.ppo_mini_batch_size={prompts}",
           f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={prompts * args.samples // ranks}",
           f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={prompts * args.samples // ranks}",
           f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={prompts * args.samples // ranks}",
           f"data.max_prompt_length={args.max_prompt_length}", f"data.max_response_length={args.response_length}",
           f"trainer.total_training_steps={steps}", "trainer.save_freq=-1", "trainer.test_freq=-1",
           "trainer.val_before_train=false", "trainer.logger=[console,file]",
           f"trainer.default_local_dir={workdir / f'ckpt_{ranks}'}", f"hydra.run.dir={workdir / f'hydra_{ranks}'}"]
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               CUDA_VISIBLE_DEVICES="")
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"training with {ranks} rank(s) failed:\n{(done.stdout + done.stderr)[-5000:]}")
    print(f"{ranks} rank(s): {steps} steps in {time.perf_counter() - start:.0f} s wall (start-up included)",
          file=sys.stderr)
    return [json.loads(line)["data"] for line in log.read_text().splitlines()]


def row(ranks: int, step: int, m: dict) -> dict:
    base = m.get("timing/data", 0.0) + m.get("timing_s/env_feedback", 0.0)
    values = {f"{p}": m.get(f"timing_s/{p}", 0.0) for p in VERL_PHASES}
    values.update({"step_s": m["timing_s/step"], "data": m.get("timing/data", 0.0),
                   "env_feedback": m.get("timing_s/env_feedback", 0.0), "score_max": m.get("timing/score_max", 0.0),
                   "reward_max": m.get("timing/reward_max", 0.0),
                   "ours_share": (base + m.get("timing/score_max", 0.0)) / m["timing_s/step"],
                   "conservative_share": (base + m.get("timing/reward_max", 0.0)) / m["timing_s/step"],
                   "probs_diff": m.get("training/rollout_probs_diff_mean")})
    return {"ranks": ranks, "step": step, **values}


def table(rows: list[dict]) -> str:
    header = ["ranks", "step", *VERL_PHASES, "step_s", "data", "env_feedback", "score_max", "reward_max", "ours_share",
              "conservative_share"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for r in rows:
        cells = [str(r["ranks"]), str(r["step"])] + [f"{r[k]:.3f}" for k in header[2:-2]]
        cells += [f"{100 * r['ours_share']:.2f}%", f"{100 * r['conservative_share']:.2f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--model", default="tiny", help="model preset (configs/model): tiny or smollm2-135m")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=32)
    parser.add_argument("--max-prompt-length", type=int, default=768)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            for step, metrics in enumerate(run(ranks, args.steps, args, Path(tmp)), start=1):
                rows.append(row(ranks, step, metrics))
    print(f"load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(table(rows))
    for ranks in args.ranks:
        mine = [r for r in rows if r["ranks"] == ranks]
        total = sum(r["step_s"] for r in mine)
        ours = sum(r["ours_share"] * r["step_s"] for r in mine)
        cons = sum(r["conservative_share"] * r["step_s"] for r in mine)
        print(f"{ranks} rank(s): our share over {len(mine)} steps {100 * ours / total:.2f}% "
              f"(max per step {100 * max(r['ours_share'] for r in mine):.2f}%; conservative {100 * cons / total:.2f}%); "
              f"rollout_probs_diff_mean max {max(r['probs_diff'] or 0 for r in mine):.1e}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
