"""LoRA against full fine-tuning on the CPU backend, SmolLM2-135M-Instruct end to end: train, export, evaluate.

    python bench/bench_lora.py [--steps 3] [--rank 64] [--arms full,lora] [--out bench/results/lora]

Trains the quickstart config at the earlier quickstart's CPU sizes, as measured (bench/bench_quickstart_recipe.py's
LETTERS: letter counts in the mix, 4 prompts x 8 samples, <= 48 tokens; fp32, 1 rank) twice, the same command but for
LoRA's keys (lora_algorithmic's adapter: rank 64, alpha 32, every linear layer, learning rate 3e-5),
and reports per arm verl's step time and phases (its file logger) and the peak resident memory of the training
worker (the FSDP actor: weights, gradients, Adam state) and of the rollout server, sampled every 0.2 s with psutil.
Then the LoRA checkpoint is exported merged (utils/load_fsdp_to_hf.py) and evaluated with the HF backend
(evaluation/evaluate_model.py, configs/eval/quickstart.yaml, greedy, `--eval-items` items a task), as a user would.
Start-up and step 1 (first calls) are reported apart from the later steps' median.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
PHASES = ["gen", "update_actor", "update_weights", "step"]
ROLES = {"ray::WorkerDict": "actor worker", "ray::TransformersServer": "rollout server"}
if str(REPO) not in sys.path:  # `python bench/bench_lora.py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))
from bench.bench_quickstart_recipe import LETTERS  # noqa: E402  (the sizes BENCHMARKS.md's LoRA rows were measured at)


def lora_keys(rank: int) -> list[str]:
    return [f"actor_rollout_ref.model.lora_rank={rank}", "actor_rollout_ref.model.lora_alpha=32",
            "actor_rollout_ref.model.target_modules=all-linear", "actor_rollout_ref.actor.optim.lr=3e-5"]


def train_command(run_dir: Path, steps: int, extra: list[str]) -> list[str]:
    return [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", "trainer.device=cpu", *LETTERS,
            f"trainer.total_training_steps={steps}", f"trainer.save_freq={steps}", "trainer.test_freq=-1",
            "trainer.val_before_train=false", "trainer.logger=[console,file]",
            f"trainer.default_local_dir={run_dir / 'ckpt'}", f"hydra.run.dir={run_dir / 'hydra'}", *extra]


def peak_rss(driver: psutil.Process, peaks: dict[str, float]) -> None:
    """Raises peaks[role] to the current RSS (MiB) of each role's process among the driver's descendants."""
    for proc in driver.children(recursive=True):
        try:
            title = proc.cmdline()[0].split(".")[0] if proc.cmdline() else ""
            if title in ROLES:
                peaks[ROLES[title]] = max(peaks.get(ROLES[title], 0.0), proc.memory_info().rss / 2**20)
        except (psutil.Error, IndexError):
            pass


def train(arm: str, run_dir: Path, steps: int, extra: list[str]) -> dict:
    """Trains one arm; returns its per-step phases, peak RSS per role and wall time."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "metrics.jsonl"
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               CUDA_VISIBLE_DEVICES="")
    cmd = train_command(run_dir, steps, extra)
    print(f"[{arm}] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    start, peaks = time.perf_counter(), {}
    with open(run_dir / "output.log", "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        driver = psutil.Process(proc.pid)
        while proc.poll() is None:
            peak_rss(driver, peaks)
            time.sleep(0.2)
    if proc.returncode:
        sys.exit(f"[{arm}] training failed; see {run_dir / 'output.log'}")
    rows = [json.loads(line)["data"] for line in log.read_text().splitlines()]
    result = {"arm": arm, "wall_s": time.perf_counter() - start, "peak_rss_mib": peaks,
              "steps": [{p: row.get(f"timing_s/{p}", 0.0) for p in PHASES} for row in rows],
              "grad_norm": [row.get("actor/grad_norm") for row in rows],
              # the CPU backend's max_memory_allocated: the actor process's own RSS peak at verl's memory probes
              "actor_peak_gib": [row.get("actor/perf/max_memory_allocated_gb") for row in rows],
              "load_average": os.getloadavg()[0]}
    (run_dir / "result.json").write_text(json.dumps(result, indent=1))  # kept if a later arm fails
    return result


def export_and_evaluate(run_dir: Path, items: int) -> dict:
    """Merged export of the arm's checkpoint, then the HF evaluation of the export; returns times and accuracy."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    timings = {}
    commands = {
        "export": [sys.executable, "utils/load_fsdp_to_hf.py", str(run_dir / "ckpt"), str(run_dir / "hf"),
                   "--dtype", "fp32", "--verify", "--quiet", "--force"],
        # scored as the run trained (--from-run reads its scoring.json: LETTERS' 48 tokens, cut responses as they are)
        "evaluate": [sys.executable, "evaluation/evaluate_model.py", "--config", "configs/eval/quickstart.yaml",
                     "--from-run", str(run_dir / "ckpt"), "--model", str(run_dir / "hf"), "--backend", "hf",
                     "--output", str(run_dir / "eval"), "decoding=[greedy]", "pass_k=[1]",
                     f"suite.categories.in_mix.size={items}", f"suite.categories.not_trained.size={items}",
                     f"suite.categories.probe.size={items}"],
    }
    for name, cmd in commands.items():
        print(f"[lora {name}] {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"[lora {name}] failed:\n{(done.stdout + done.stderr)[-4000:]}")
        timings[f"{name}_s"] = round(time.perf_counter() - start, 1)
    results = sorted((run_dir / "eval").rglob("results.json"))
    return {**timings, "results": [str(p) for p in results]}


def summary(result: dict) -> str:
    later = result["steps"][1:] or result["steps"]
    median = {p: statistics.median(s[p] for s in later) for p in PHASES}
    first = result["steps"][0]
    peaks = ", ".join(f"{role} {mib:.0f} MiB" for role, mib in sorted(result["peak_rss_mib"].items()))
    return (f"| {result['arm']} | {first['step']:.1f} | " + " | ".join(f"{median[p]:.1f}" for p in PHASES)
            + f" | {peaks} | {result['wall_s']:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--eval-items", type=int, default=20, help="items per category of the held-out suite")
    parser.add_argument("--arms", default="full,lora", help="which arms to run, in order (full, lora)")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/lora")
    args = parser.parse_args()
    out = args.out.resolve()
    arms = {"full": [], "lora": lora_keys(args.rank)}
    results = [train(arm, out / arm, args.steps, arms[arm]) for arm in args.arms.split(",")]
    for result in results:
        if result["arm"] == "lora":
            result["pipeline"] = export_and_evaluate(out / "lora", args.eval_items)
            print(json.dumps(result["pipeline"], indent=1))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    print(f"load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("| arm | step 1 (s) | " + " | ".join(f"{p} (s, median of later steps)" for p in PHASES)
          + " | peak RSS | wall (s) |")
    print("|---|" + "---:|" * (len(PHASES) + 1) + "---|---:|")
    for result in results:
        print(summary(result))


if __name__ == "__main__":
    main()
