"""Our CPU step, with each of our two rollouts, against TRL's GRPOTrainer: the same GRPO step, one machine, one run.

    python bench/bench_trl.py --install                  # once: TRL into .venv-trl-site (never into .venv)
    python bench/bench_trl.py --model tiny --steps 3     # plumbing check, ~6 minutes on 2 cores
    python bench/bench_trl.py --steps 4                  # SmolLM2-135M-Instruct, the quickstart model
    python bench/bench_trl.py --steps 4 --arms vllm trl  # some arms only
    python bench/bench_trl.py --steps 4 --fixed-length   # every response runs to the limit: the same tokens per arm
    # ours without the old_log_prob pass (the rollout's log-probs serve as the old ones; TRL skips it too):
    python bench/bench_trl.py --steps 4 --override algorithm.rollout_correction.bypass_mode=true

All arms read their sizes and settings from ONE composed config: configs/quickstart.yaml with `trainer.device=cpu`,
the bench's overrides and the CPU backend's application (env.on_cpu, training.launch.config.resolve_config,
training.launch.hardware.apply_cpu_backend; the order of training/train_grpo.py), so the comparison follows whatever the
quickstart says. They run one after the other in --arms' order (never at once: 2 cores), each in its own subprocess:

- transformers, vllm (ours): `training/train_grpo.py --config-name quickstart trainer.device=cpu` with the same
  overrides and `actor_rollout_ref.rollout.name=transformers` (our rollout, training/cpu_backend/rollout.py) or `vllm`
  (verl's own vLLM rollout on vLLM's CPU build); verl's per-step `timing_s/*` from its file logger
  (VERL_FILE_LOGGER_PATH). Step = verl's `timing_s/step`; generation = `gen` (sampling, with our reward scored inside
  the agent loop); train/update = `update_actor`; other = the rest (old_log_prob, ref, adv, update_weights,
  env_feedback, ...). Launch -> first rollout = the process's start to verl's first step (training/trainer/progress.py's
  `train_begin`: Ray, the workers, the rollout servers and the first weight sync are done; no validation here).
- trl: `GRPOTrainer` (transformers generation, no vLLM) on the same model folder, the first prompts of our train stream
  (training.trainer.data.build_train_stream: same mix, seed, system prompt, prompt-length filter), our reward
  (envs.trl_reward.make_trl_reward with the config's reward options), and the mapped settings of
  `trl_arm.trl_settings` (group size, prompts per optimizer step, micro-batch, token limits, sampling, optimizer, KL,
  entropy, clipping, loss aggregation, gradient checkpointing, fp32, threads); phases as bench/trl_arm.py says.

Ratios are ours / TRL, mean step time of steps 2..N (step 1 is shown apart: start-up work lands in it). Results go
to `--out` (default bench/results/trl_<model>_<time>/: results.json, every arm's log) and markdown tables are printed.

TRL install (TRL 1.16.0: requires transformers>=4.56.2, accelerate>=1.10.1, datasets>=4.7.0, torch unpinned, so it
sits beside torch 2.13.0 CPU, transformers 5.9.0/5.10.4 and accelerate 1.15.0 with nothing else to install; checked
with `pip install --dry-run trl==1.16.0 torch==2.13.0 transformers==5.9.0 accelerate==1.15.0`, which would install
trl alone). Only the TRL subprocess gets it, on PYTHONPATH:

    .venv/bin/python -m pip install --no-deps --target .venv-trl-site trl==1.16.0
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

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/bench_trl.py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))

from bench.trl_arm import (  # noqa: E402  (re-exported: tests/test_bench_trl.py reads them here)
    INSTALL_COMMAND,
    TRL_SITE,
    TRL_VERSION,
    trl_installed,
    trl_row,
    trl_settings,
    trl_worker,
)

OURS_ARMS = ("transformers", "vllm")  # actor_rollout_ref.rollout.name on the CPU backend
OURS_PHASES = ["gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "env_feedback"]
TINY_MAX_PROMPT_LENGTH = 768  # the tiny model's tokenizer: number_sorting prompts are ~500 tokens (384 refuses them)
SUMMARY = ["total", "generation", "train", "other"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model preset (configs/model): smollm2-135m or tiny")
    parser.add_argument("--steps", type=int, default=4, help="training steps per arm (steady state: steps 2..N)")
    parser.add_argument("--prompts", type=int, default=None,
                        help="prompts per step (data.train_batch_size = ppo_mini_batch_size); default: the config's")
    parser.add_argument("--samples", type=int, default=None, help="group size (rollout.n); default: the config's")
    parser.add_argument("--response-length", type=int, default=None, help="data.max_response_length")
    parser.add_argument("--max-prompt-length", type=int, default=None,
                        help=f"data.max_prompt_length; default: the config's ({TINY_MAX_PROMPT_LENGTH} for the tiny "
                             "model, whose tokenizer makes longer prompts)")
    parser.add_argument("--fixed-length", action="store_true",
                        help="every response runs to data.max_response_length in every arm (rollout.ignore_eos; TRL: "
                             "min_new_tokens), so the arms time the same number of tokens, not their own samples'")
    parser.add_argument("--micro-batch", type=int, default=None,
                        help="sequences per forward/backward (actor/log-prob micro-batches); default: the config's")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="any further hydra override, applied to every arm (repeatable)")
    parser.add_argument("--arms", nargs="+", default=[*OURS_ARMS, "trl"], choices=[*OURS_ARMS, "trl"],
                        help="which arms, run in this order (swap it to see how much the host drifted)")
    parser.add_argument("--out", type=Path, default=None,
                        help="work folder (default: bench/results/trl_<model>_<time>)")
    parser.add_argument("--install", action="store_true", help=f"install trl=={TRL_VERSION} into {TRL_SITE.name} first")
    parser.add_argument("--trl-worker", action="store_true", help=argparse.SUPPRESS)  # the TRL arm's subprocess
    return parser.parse_args(argv)


# ----- one config for every arm

def bench_overrides(args: argparse.Namespace) -> list[str]:
    """Returns the hydra overrides every arm shares (model, sizes, steps, anything from --override)."""
    overrides = [f"model={args.model}", "trainer.device=cpu", "trainer.n_gpus_per_node=1",
                 f"trainer.total_training_steps={args.steps}"]
    if args.prompts is not None:
        overrides += [f"data.train_batch_size={args.prompts}",
                      f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}"]
    if args.samples is not None:
        overrides.append(f"actor_rollout_ref.rollout.n={args.samples}")
    if args.response_length is not None:
        overrides.append(f"data.max_response_length={args.response_length}")
    max_prompt_length = args.max_prompt_length
    if max_prompt_length is None and args.model == "tiny":
        max_prompt_length = TINY_MAX_PROMPT_LENGTH
    if max_prompt_length is not None:
        overrides.append(f"data.max_prompt_length={max_prompt_length}")
    if args.micro_batch is not None:
        overrides += [f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
                      f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
                      f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={args.micro_batch}"]
    if args.fixed_length:
        overrides.append("actor_rollout_ref.rollout.ignore_eos=true")
    return overrides + list(args.override)


def compose(overrides: list[str]):
    """Returns the quickstart config as training/train_grpo.py's prepare() leaves it for a CPU run: env.on_cpu (keys
    in `overrides` win), resolved model path, the CPU backend's keys."""
    from training.launch.config import compose_config, resolve_config
    from training.launch.hardware import apply_cpu_backend, apply_cpu_overrides, resolve_device

    cfg = compose_config("quickstart", overrides)
    resolve_device(cfg, 0)
    apply_cpu_overrides(cfg, {o.split("=", 1)[0].lstrip("+~") for o in overrides})
    resolve_config(cfg, gpu_count=1)
    apply_cpu_backend(cfg)
    return cfg


# ----- ours

def ours_command(arm: str, overrides: list[str], workdir: Path) -> tuple[list[str], dict[str, str]]:
    """Returns the command line and environment of our arm `arm` (its rollout; file logger into `workdir`)."""
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *overrides,
           f"actor_rollout_ref.rollout.name={arm}", "trainer.save_freq=-1", "trainer.test_freq=-1",
           "trainer.val_before_train=false", "trainer.logger=[console,file]",
           f"trainer.default_local_dir={workdir / f'{arm}_ckpt'}", f"hydra.run.dir={workdir / f'{arm}_hydra'}"]
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(workdir / f"{arm}_metrics.jsonl"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)  # TRL's folder must not reach our arm
    return cmd, env


def ours_row(step: int, m: dict, arm: str = "ours") -> dict:
    """One step of our arm: verl's phases, then the bench's split (generation, train, other) and the lengths."""
    phases = {p: float(m.get(f"timing_s/{p}", 0.0)) for p in OURS_PHASES}
    total = float(m["timing_s/step"])
    generation, train = phases["gen"] + phases["reward"], phases["update_actor"]
    return {"arm": arm, "step": step, "total": total, "generation": generation, "train": train,
            "other": total - generation - train, "phases": phases, "data": float(m.get("timing/data", 0.0)),
            "response_length": m.get("response_length/mean"), "reward": m.get("critic/score/mean"),
            "rollout_probs_diff_mean": m.get("training/rollout_probs_diff_mean"),
            # shares of the update's sequences and tokens left out (zero advantage: training/zero_advantage/rules.py)
            "update_skipped": m.get("actor/update_skipped/sequences"),
            "update_skipped_tokens": m.get("actor/update_skipped/tokens")}


def run_logged(name: str, cmd: list[str], env: dict, log_path: Path) -> float:
    """Runs one arm's command with its output in `log_path`; returns the wall seconds, or exits with the log's end."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"{name} failed (exit {done.returncode}); last lines of {log_path}:\n"
                 + "\n".join(log_path.read_text().splitlines()[-40:]))
    return time.perf_counter() - start


def run_ours(arm: str, overrides: list[str], workdir: Path) -> tuple[list[dict], float, float | None]:
    """Runs our arm; returns (its steps, wall seconds, seconds from launch to the first rollout)."""
    cmd, env = ours_command(arm, overrides, workdir)
    launched = time.time()
    wall = run_logged(f"our {arm} arm", cmd, env, workdir / f"{arm}.log")
    lines = (workdir / f"{arm}_metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line)["data"] for line in lines]
    progress = workdir / f"{arm}_ckpt" / "logs" / "progress.jsonl"
    begin = [e["time"] for e in map(json.loads, progress.read_text().splitlines()) if e.get("kind") == "train_begin"]
    return [ours_row(step, m, arm) for step, m in enumerate(metrics, start=1)], wall, \
        (begin[0] - launched if begin else None)


# ----- TRL

def worker_argv(args: argparse.Namespace) -> list[str]:
    """Returns the options that make the TRL worker compose the same config as this run."""
    argv = ["--model", args.model, "--steps", str(args.steps)]
    for flag, value in [("--prompts", args.prompts), ("--samples", args.samples),
                        ("--response-length", args.response_length), ("--max-prompt-length", args.max_prompt_length),
                        ("--micro-batch", args.micro_batch)]:
        if value is not None:
            argv += [flag, str(value)]
    for override in args.override:
        argv += ["--override", override]
    return argv + (["--fixed-length"] if args.fixed_length else [])


def run_trl(args: argparse.Namespace, settings: dict, workdir: Path) -> tuple[list[dict], float, dict]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--trl-worker", "--out", str(workdir), *worker_argv(args)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TRL_SITE), str(REPO)]), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS=str(settings["threads"]),
               TOKENIZERS_PARALLELISM="false")
    wall = run_logged("TRL arm", cmd, env, workdir / "trl.log")
    result = json.loads((workdir / "trl_steps.json").read_text())
    return result.pop("steps"), wall, result


# ----- report

def steady(rows: list[dict], key: str) -> float | None:
    """Mean of `key` over steps 2..N (None with fewer than 2 steps)."""
    values = [r[key] for r in rows if r["step"] >= 2]
    return statistics.fmean(values) if values else None


def steady_phase(rows: list[dict], name: str) -> float | None:
    values = [r["phases"].get(name, 0.0) for r in rows if r["step"] >= 2]
    return statistics.fmean(values) if values else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def step_table(rows: list[dict]) -> str:
    lines = ["| arm | step | step s | generation | train/update | other | response tokens | reward | update skipped "
             "(sequences / tokens) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        skipped = (f"{r['update_skipped']:.0%} / {r['update_skipped_tokens']:.0%}"
                   if r.get("update_skipped") is not None else "-")
        lines.append(f"| {r['arm']} | {r['step']} | {r['total']:.2f} | {r['generation']:.2f} | {r['train']:.2f} | "
                     f"{r['other']:.2f} | {fmt(r['response_length'], 1)} | {fmt(r['reward'], 3)} | {skipped} |")
    return "\n".join(lines)


def ratio_table(arms: dict[str, list[dict]], trl_rows: list[dict]) -> str:
    """Steps 2..N of each of our arms against TRL's: seconds and ours / TRL."""
    names = list(arms)
    lines = ["| steps 2..N (mean s) | " + " | ".join(names) + " | TRL | " + " | ".join(f"{n} / TRL" for n in names)
             + " |", "|---|" + "---:|" * (2 * len(names) + 1)]
    for key, label in zip(SUMMARY, ["step", "generation", "train/update", "other"]):
        ours, trl = [steady(arms[n], key) for n in names], steady(trl_rows, key)
        ratios = [fmt(a / trl if a is not None and trl else None) + "x" for a in ours]
        lines.append(f"| {label} | " + " | ".join(fmt(a) for a in ours) + f" | {fmt(trl)} | " + " | ".join(ratios)
                     + " |")
    first = [next((r["total"] for r in rows if r["step"] == 1), None) for rows in [*arms.values(), trl_rows]]
    ratios = [fmt(a / first[-1] if a is not None and first[-1] else None) + "x" for a in first[:-1]]
    lines.append("| step 1 (apart) | " + " | ".join(fmt(a) for a in first) + " | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def phase_table(rows: list[dict], names: list[tuple[str, str]]) -> str:
    total = steady(rows, "total") or 0.0
    lines = ["| phase | mean s (steps 2..N) | share of step |", "|---|---:|---:|"]
    accounted = 0.0
    for name, label in names:
        value = steady_phase(rows, name) or 0.0
        accounted += value
        lines.append(f"| {label} | {value:.2f} | {100 * value / total if total else 0:.1f}% |")
    lines.append(f"| rest | {total - accounted:.2f} | {100 * (total - accounted) / total if total else 0:.1f}% |")
    return "\n".join(lines)


OURS_DETAIL = [("gen", "gen (sampling + reward in the agent loop)"), ("old_log_prob", "old_log_prob"), ("ref", "ref"),
               ("adv", "adv"), ("update_actor", "update_actor"), ("update_weights", "update_weights"),
               ("env_feedback", "env_feedback (ours)")]
TRL_DETAIL = [("generate", "generate (transformers generate, decode)"), ("reward", "reward (our function)"),
              ("ref", "ref log-probs"), ("old_log_prob", "old log-probs"),
              ("generate_rest", "rest of generate-and-score (tokenise, advantages, metrics)"),
              ("loss_forward", "loss forward"), ("backward", "backward"), ("optimizer", "optimizer (clip, AdamW)")]


def with_generate_rest(rows: list[dict]) -> list[dict]:
    for r in rows:
        p = r["phases"]
        p["generate_rest"] = p["gen_and_score"] - p["generate"] - p["reward"] - p["ref"] - p["old_log_prob"]
    return rows


def report(result: dict) -> str:
    """The markdown the bench prints: settings and load, every step, the ratios, each arm's phases."""
    arms = {name: result[name]["steps"] for name in OURS_ARMS if result.get(name, {}).get("steps")}
    trl_rows = with_generate_rest(result.get("trl", {}).get("steps", []))
    s = result["settings"]
    walls = ", ".join(f"{name} {result[name]['wall_s']:.0f} s" for name in [*arms, "trl"] if result.get(name, {}).get(
        "steps"))
    launch = ", ".join(f"{name} {fmt(result[name].get('first_rollout_s'), 1)} s" for name in arms)
    fixed = " (every one that long: --fixed-length)" if "generation_kwargs" in s["config"] else ""
    head = (f"{result['model']}, {s['prompts']} prompts x {s['config']['num_generations']} samples, "
            f"{s['config']['max_completion_length']}-token responses{fixed}, "
            f"prompts <= {s['max_prompt_length']} tokens, "
            f"{s['steps']} steps, fp32, {s['threads']} torch threads, TRL {result.get('trl', {}).get('trl')}; "
            f"load average {result['load_before']:.2f} before, {result['load_after']:.2f} after "
            f"({os.cpu_count()} cores). Wall (start-up included): {walls}. Launch -> first rollout: {launch}.")
    loads = ", ".join(f"{name} {result[name]['load'][0]:.1f} -> {result[name]['load'][1]:.1f}"
                      for name in [*arms, "trl"] if result.get(name, {}).get("load"))
    if loads:  # the machine is shared: an arm run under more load is slower for it
        head += f" Load average as each arm started -> ended: {loads}."
    parts = [head, step_table([r for rows in [*arms.values(), trl_rows] for r in rows])]
    if trl_rows and arms:
        parts.append(ratio_table(arms, trl_rows))
    parts += [f"{name}:\n\n" + phase_table(rows, OURS_DETAIL) for name, rows in arms.items()]
    if trl_rows:
        parts += ["TRL:\n\n" + phase_table(trl_rows, TRL_DETAIL),
                  "Not matched:\n" + "\n".join(f"- {u}" for u in s["unmatched"])]
    return "\n\n".join(parts)


def main() -> None:
    args = parse_args()
    if args.trl_worker:
        trl_worker(compose(bench_overrides(args)), args.out)
        return
    if args.install and not trl_installed():
        subprocess.run(INSTALL_COMMAND, cwd=REPO, check=True)
    if "trl" in args.arms and not trl_installed():
        sys.exit(f"trl {TRL_VERSION} is not in {TRL_SITE}; install it with --install, or:\n  "
                 + " ".join(INSTALL_COMMAND))
    overrides = bench_overrides(args)
    settings = trl_settings(compose(overrides))
    workdir = (args.out or REPO / "bench" / "results" / f"trl_{args.model}_{time.strftime('%Y%m%d_%H%M%S')}").resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    result = {"model": args.model, "overrides": overrides, "settings": settings, "load_before": os.getloadavg()[0]}
    print(f"work folder: {workdir}", file=sys.stderr)
    result["order"] = list(dict.fromkeys(args.arms))  # run in the order given: swap it to see the host drift
    for arm in result["order"]:
        load = os.getloadavg()[0]
        if arm == "trl":
            steps, wall, extra = run_trl(args, settings, workdir)
        else:
            steps, wall, first_rollout = run_ours(arm, overrides, workdir)
            extra = {"first_rollout_s": first_rollout}
        result[arm] = {"steps": steps, "wall_s": wall, **extra, "load": [load, os.getloadavg()[0]]}
        print(f"{arm}: {len(steps)} steps in {wall:.0f} s wall (start-up included)", file=sys.stderr)
    result["load_after"] = os.getloadavg()[0]
    (workdir / "results.json").write_text(json.dumps(result, indent=1))
    print(report(result))
    print(f"results: {workdir / 'results.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
