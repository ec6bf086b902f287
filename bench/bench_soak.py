"""Soak: a long tiny-model CPU run, the memory of every process of it sampled each step, and what it leaves behind.

    python bench/bench_soak.py --steps 200 [--dynamic-sampling] [--out DIR]

Runs `training/train_grpo.py` (quickstart config, the tiny model, 2 prompts x 4 samples, 24-token responses) and,
whenever verl's console prints `step:N - `, records the resident memory (RSS) of the driver and of each of its
descendants (Ray's GCS and raylet, the TaskRunner, FSDP workers, rollout server, reward workers, their scoring and
producer children), keyed by command line. Then: growth of each process from step 20 to the last step (target
<= 10%), and what is left after exit: descendants still running a minute later, new /dev/shm entries, new files in the temporary
directory (the run's own TMPDIR).
Writes DIR/soak.json (the samples) and prints a table; exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
TINY = ["model=tiny", "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "data.max_prompt_length=768",
        "data.max_response_length=24", "env.validation_size=4", "trainer.test_freq=-1",
        "trainer.val_before_train=false", "trainer.logger=[console]", "env.dump.every_steps=0",
        "env.console=verbose"]  # the step lines this reads are verl's console output
BASELINE_STEP = 20


def role(proc: psutil.Process) -> str:
    """A stable name for a process: its Ray title (ray::ClassName) or its script and module."""
    try:
        line = " ".join(proc.cmdline())
    except psutil.Error:
        return "?"
    if line.startswith("ray::"):
        return line.split()[0].split(".")[0]
    for marker in ("envs.producer", "envs.isolation", "gcs_server", "raylet", "dashboard", "log_monitor",
                   "train_grpo.py", "runtime_env", "monitor.py", "default_worker.py"):
        if marker in line:
            return marker
    return Path(proc.cmdline()[0]).name if proc.cmdline() else "?"


def sample(driver: psutil.Process) -> dict[str, float]:
    """RSS in MiB per process of the run, named role#pid."""
    out = {}
    for proc in [driver, *driver.children(recursive=True)]:
        try:
            out[f"{role(proc)}#{proc.pid}"] = proc.memory_info().rss / 2**20
        except psutil.Error:
            pass
    return out


def snapshot_leftovers(tmp: Path) -> tuple[set[str], set[str]]:
    """/dev/shm entries (machine-wide: other runs on the machine show up too) and the run's own TMPDIR."""
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    return shm, {str(p.relative_to(tmp)) for p in tmp.rglob("*")}


def curve_table(samples: list[dict], every: int = 20, min_mib: float = 300.0) -> str:
    """A markdown table of RSS (MiB) at step 1 and every `every` steps: the processes of at least `min_mib` at the
    last sample, and the sum over all processes of the run."""
    picked = [s for s in samples if s["step"] == samples[0]["step"] or s["step"] % every == 0]
    if picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    names = sorted(n for n, mib in samples[-1]["rss_mib"].items() if mib >= min_mib)
    lines = ["| process | " + " | ".join(f"step {s['step']}" for s in picked) + " |",
             "| --- |" + " ---: |" * len(picked)]
    for name in names:
        lines.append(f"| {name.split('#')[0]} | " + " | ".join(
            f"{s['rss_mib'].get(name, float('nan')):.0f}" for s in picked) + " |")
    lines.append(f"| all {len(samples[-1]['rss_mib'])} processes | " + " | ".join(
        f"{sum(s['rss_mib'].values()):.0f}" for s in picked) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dynamic-sampling", action="store_true")
    parser.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="soak-")))
    parser.add_argument("--table", type=Path, help="print the RSS curve of an earlier run's soak.json and exit")
    args = parser.parse_args()
    if args.table:
        print(curve_table(json.loads(args.table.read_text())["samples"]))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *TINY, "trainer.device=cpu",
           f"trainer.total_training_steps={args.steps}", "trainer.save_freq=-1",
           f"trainer.default_local_dir={args.out / 'ckpt'}", f"hydra.run.dir={args.out / 'hydra'}"]
    if args.dynamic_sampling:
        cmd += ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=20",
                f"reward.custom_reward_function.path={REPO / 'tests' / 'noisy_reward.py'}"]
    tmp = args.out / "tmp"  # the run's TMPDIR, so that its temporary files are told from other programs'
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
               CUDA_VISIBLE_DEVICES="", PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    shm_before, tmp_before = snapshot_leftovers(tmp)
    log = args.out / "output.log"
    samples: list[dict] = []
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        driver, seen, family = psutil.Process(proc.pid), 0, set()
        while proc.poll() is None:
            time.sleep(0.5)
            steps = [int(s) for s in re.findall(r"\bstep:(\d+) - ", log.read_text(errors="replace"))]
            if steps and max(steps) > seen:
                seen = max(steps)
                rss = sample(driver)
                family |= {int(key.rsplit("#", 1)[1]) for key in rss}
                samples.append({"step": seen, "time": time.time(), "rss_mib": rss})
    deadline = time.monotonic() + 60  # the run's guardian (training/launch/guardian.py) cleans up within seconds
    while True:
        left = [pid for pid in family if psutil.pid_exists(pid)
                and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(1)
    shm_after, tmp_after = snapshot_leftovers(tmp)
    growth = {}
    base = next((s for s in samples if s["step"] >= BASELINE_STEP), None)
    if base is not None:
        for name, start in base["rss_mib"].items():
            end = samples[-1]["rss_mib"].get(name)
            if end is not None:
                growth[name] = {"step": base["step"], "start_mib": round(start, 1), "end_mib": round(end, 1),
                                "growth": round(end / start - 1, 4)}
    result = {"command": cmd, "exit_code": proc.returncode, "steps": seen, "samples": samples, "growth": growth,
              "left_running": left, "new_shm": sorted(shm_after - shm_before),
              "new_tmp": sorted(tmp_after - tmp_before)}
    (args.out / "soak.json").write_text(json.dumps(result, indent=1))
    print(f"exit {proc.returncode}; {seen} steps; samples in {args.out / 'soak.json'}")
    for name, g in sorted(growth.items(), key=lambda kv: -kv[1]["growth"]):
        print(f"  {name:40s} step {g['step']}: {g['start_mib']:8.1f} MiB -> {g['end_mib']:8.1f} MiB  "
              f"{100 * g['growth']:+.1f}%")
    print(f"left running: {left}; new /dev/shm: {result['new_shm']}; new in the run's TMPDIR: "
          f"{result['new_tmp']}")
    bad = proc.returncode or left or result["new_shm"] or any(g["growth"] > 0.10 for g in growth.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
