"""Ours (verl on the CPU backend) against TRL's GRPOTrainer: the same GRPO step on the same machine, in one run.

    python bench/bench_trl.py --install                  # once: TRL into .venv-trl-site (never into .venv)
    python bench/bench_trl.py --model tiny --steps 3     # plumbing check, ~3.5 minutes on 2 cores
    python bench/bench_trl.py --steps 4                  # SmolLM2-135M-Instruct, the quickstart model
    # ours without the old_log_prob pass (the rollout's log-probs serve as the old ones; TRL skips it too):
    python bench/bench_trl.py --steps 4 --override algorithm.rollout_correction.bypass_mode=true

Both arms read their sizes and settings from ONE composed config: configs/quickstart.yaml with `trainer.device=cpu`,
the bench's overrides and the CPU backend's application (env.on_cpu, training.launch.config.resolve_config,
training.launch.hardware.apply_cpu_backend; the order of training/train_grpo.py), so the comparison follows whatever the
quickstart says. They run one after the other (never at once: 2 cores), each in its own subprocess:

- ours: `training/train_grpo.py --config-name quickstart trainer.device=cpu` with the same overrides; verl's per-step
  `timing_s/*` from its file logger (VERL_FILE_LOGGER_PATH). Step = verl's `timing_s/step`; generation = `gen`
  (sampling, with our reward scored inside the agent loop); train/update = `update_actor`; other = the rest
  (old_log_prob, ref, adv, update_weights, env_feedback, ...).
- TRL: `GRPOTrainer` (transformers generation, no vLLM) on the same model folder, the first prompts of our train stream
  (training.trainer.data.build_train_stream: same mix, seed, system prompt, prompt-length filter), our reward
  (envs.trl_reward.make_trl_reward with the config's reward options), and the mapped settings of
  `trl_settings` (group size, prompts per optimizer step, micro-batch, token limits, sampling, optimizer, KL, entropy,
  clipping, loss aggregation, gradient checkpointing, fp32, threads). Step = on_step_begin -> on_step_end of a
  TrainerCallback; generation = `_generate_and_score_completions` less its reference/old log-prob forwards (sampling,
  decoding, reward); train/update = `training_step` less the generation inside it (loss forward + backward) plus the
  optimizer (clipping, AdamW, scheduler); other = the rest (reference log-probs, ...).

The ratio is ours / TRL, mean step time of steps 2..N (step 1 is shown apart: start-up work lands in it). Results go
to `--out` (default bench/results/trl_<model>_<time>/: results.json, both logs) and a markdown table is printed.

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
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/bench_trl.py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))

TRL_VERSION = "1.16.0"
TRL_SITE = REPO / ".venv-trl-site"
INSTALL_COMMAND = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(TRL_SITE),
                   f"trl=={TRL_VERSION}"]
OURS_PHASES = ["gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights", "env_feedback"]
TRL_PHASES = ["generate", "reward", "ref", "old_log_prob", "gen_and_score", "loss_forward", "training_step",
              "optimizer", "data"]
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
    parser.add_argument("--micro-batch", type=int, default=None,
                        help="sequences per forward/backward (actor/log-prob micro-batches); default: the config's")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="any further hydra override, applied to both arms (repeatable)")
    parser.add_argument("--arms", nargs="+", default=["ours", "trl"], choices=["ours", "trl"])
    parser.add_argument("--out", type=Path, default=None,
                        help="work folder (default: bench/results/trl_<model>_<time>)")
    parser.add_argument("--install", action="store_true", help=f"install trl=={TRL_VERSION} into {TRL_SITE.name} first")
    parser.add_argument("--trl-worker", action="store_true", help=argparse.SUPPRESS)  # the TRL arm's subprocess
    return parser.parse_args(argv)


# ----- one config for both arms

def bench_overrides(args: argparse.Namespace) -> list[str]:
    """Returns the hydra overrides both arms share (model, sizes, steps, anything from --override)."""
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


def trl_settings(cfg) -> dict[str, Any]:
    """Maps a composed (CPU) config to TRL: {"config": GRPOConfig kwargs, "prompts", "steps", "model_path", "threads",
    "reward_options", "unmatched": [what TRL cannot mirror, with why]}. Pure: reads `cfg`, imports nothing of TRL.
    Raises ValueError for a config whose step is not one optimizer step over one generation (TRL counts optimizer
    steps, so the per-step times would not compare)."""
    from omegaconf import OmegaConf

    from training.launch.hardware import cpu_threads

    arr, data, algo = cfg.actor_rollout_ref, cfg.data, cfg.algorithm
    actor, rollout, optim = arr.actor, arr.rollout, arr.actor.optim
    prompts, n = int(data.train_batch_size), int(rollout.n)
    micro = int(actor.ppo_micro_batch_size_per_gpu)
    ranks = int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes)
    if ranks != 1:
        raise ValueError(f"{ranks} training ranks: the TRL arm is one process; compare with trainer.n_gpus_per_node=1")
    if int(actor.ppo_mini_batch_size) != prompts or int(actor.ppo_epochs) != 1:
        raise ValueError(f"ppo_mini_batch_size={actor.ppo_mini_batch_size}, ppo_epochs={actor.ppo_epochs} with "
                         f"train_batch_size={prompts}: a step of ours makes several optimizer updates; the comparison "
                         "needs one (ppo_mini_batch_size = train_batch_size, ppo_epochs = 1)")
    if (prompts * n) % micro:
        raise ValueError(f"{prompts} prompts x {n} samples do not divide into micro-batches of {micro}")
    unmatched = []
    if str(algo.adv_estimator) != "grpo":
        unmatched.append(f"algorithm.adv_estimator={algo.adv_estimator}: TRL has GRPO's group-normalised "
                         "advantage only")
    use_kl_loss = bool(actor.use_kl_loss)
    if bool(algo.use_kl_in_reward):
        unmatched.append("algorithm.use_kl_in_reward: TRL has no KL penalty in the reward (only in the loss)")
    if use_kl_loss and str(actor.kl_loss_type) not in ("low_var_kl", "k3"):
        unmatched.append(f"actor.kl_loss_type={actor.kl_loss_type}: TRL's KL term is the k3 estimator (low_var_kl)")
    aggregation = {"token-mean": "dapo", "seq-mean-token-mean": "grpo", "seq-mean-token-sum-norm": "dr_grpo"}
    loss_type = aggregation.get(str(actor.loss_agg_mode), "dapo")
    if str(actor.loss_agg_mode) not in aggregation:
        unmatched.append(f"actor.loss_agg_mode={actor.loss_agg_mode}: no TRL loss_type; using dapo (token mean)")
    if str(actor.policy_loss.loss_mode) != "vanilla":
        unmatched.append(f"actor.policy_loss.loss_mode={actor.policy_loss.loss_mode}: TRL runs the clipped PPO loss")
    unmatched.append(f"actor.clip_ratio_c={actor.clip_ratio_c} (dual clip for negative advantages): no TRL "
                     "equivalent; inactive here (one epoch over fresh samples: the ratio is 1)")
    unmatched.append("rollout: ours prefills a group's prompt once for its n samples and returns sampling log-probs; "
                     "TRL's transformers generate() runs the n copies of each prompt as separate rows")
    if not bool(OmegaConf.select(cfg, "algorithm.rollout_correction.bypass_mode", default=False)):
        unmatched.append("old log-probs: verl recomputes them every step (old_log_prob phase) unless "
                         "algorithm.rollout_correction.bypass_mode=true (then the rollout's own log-probs serve); TRL "
                         "skips them when generation and optimizer step are aligned (one step per generation, "
                         "num_iterations=1)")
    reward = OmegaConf.to_container(cfg.env.reward, resolve=True)
    model_path = str(arr.model.path)
    config = {
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": prompts * n // micro,
        "num_generations": n,
        "num_iterations": int(actor.ppo_epochs),
        "max_completion_length": int(data.max_response_length),
        "temperature": float(rollout.temperature),
        "top_p": float(rollout.top_p),
        "top_k": max(int(rollout.top_k), 0),
        "learning_rate": float(optim.lr),
        "lr_scheduler_type": "constant" if str(optim.lr_scheduler_type) == "constant" else str(optim.lr_scheduler_type),
        "warmup_steps": 0 if int(optim.lr_warmup_steps) < 0 else int(optim.lr_warmup_steps),
        "weight_decay": float(optim.weight_decay),
        "adam_beta1": float(optim.betas[0]),
        "adam_beta2": float(optim.betas[1]),
        "optim": "adamw_torch",
        "max_grad_norm": float(actor.grad_clip),
        "beta": float(actor.kl_loss_coef) if use_kl_loss else 0.0,
        "epsilon": float(actor.clip_ratio_low if actor.get("clip_ratio_low") is not None else actor.clip_ratio),
        "epsilon_high": float(actor.clip_ratio_high if actor.get("clip_ratio_high") is not None else actor.clip_ratio),
        "loss_type": loss_type,
        "scale_rewards": "group" if bool(algo.norm_adv_by_std_in_grpo) else "none",
        "entropy_coef": float(actor.entropy_coeff),
        "gradient_checkpointing": bool(arr.model.enable_gradient_checkpointing),
        "gradient_checkpointing_kwargs": {"use_reentrant": False},  # what verl's FSDP engine passes
        "bf16": False,
        "fp16": False,
        "use_cpu": True,
        "model_init_kwargs": {"dtype": "float32", "attn_implementation": "sdpa"},  # the CPU backend's fp32 + sdpa
        "max_steps": int(cfg.trainer.total_training_steps),
        "shuffle_dataset": False,  # ours reads the stream in order
        "seed": int(cfg.env.seed),
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        "log_completions": False,
    }
    return {"config": config, "prompts": prompts, "steps": int(cfg.trainer.total_training_steps),
            "max_prompt_length": int(data.max_prompt_length), "model_path": model_path,
            "threads": cpu_threads(ranks), "reward_options": reward, "unmatched": unmatched}


# ----- ours

def ours_command(overrides: list[str], workdir: Path) -> tuple[list[str], dict[str, str]]:
    """Returns the command line and environment of our arm (training/train_grpo.py, file logger into `workdir`)."""
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *overrides,
           "trainer.save_freq=-1", "trainer.test_freq=-1", "trainer.val_before_train=false",
           "trainer.logger=[console,file]", f"trainer.default_local_dir={workdir / 'ours_ckpt'}",
           f"hydra.run.dir={workdir / 'ours_hydra'}"]
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(workdir / "ours_metrics.jsonl"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)  # TRL's folder must not reach our arm
    return cmd, env


def ours_row(step: int, m: dict) -> dict:
    """One step of our arm: verl's phases, then the bench's split (generation, train, other) and the lengths."""
    phases = {p: float(m.get(f"timing_s/{p}", 0.0)) for p in OURS_PHASES}
    total = float(m["timing_s/step"])
    generation, train = phases["gen"] + phases["reward"], phases["update_actor"]
    return {"arm": "ours", "step": step, "total": total, "generation": generation, "train": train,
            "other": total - generation - train, "phases": phases, "data": float(m.get("timing/data", 0.0)),
            "response_length": m.get("response_length/mean"), "reward": m.get("critic/score/mean")}


def run_logged(name: str, cmd: list[str], env: dict, log_path: Path) -> float:
    """Runs one arm's command with its output in `log_path`; returns the wall seconds, or exits with the log's end."""
    start = time.perf_counter()
    with open(log_path, "w") as log:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        sys.exit(f"{name} failed (exit {done.returncode}); last lines of {log_path}:\n"
                 + "\n".join(log_path.read_text().splitlines()[-40:]))
    return time.perf_counter() - start


def run_ours(overrides: list[str], workdir: Path) -> tuple[list[dict], float]:
    cmd, env = ours_command(overrides, workdir)
    wall = run_logged("our arm", cmd, env, workdir / "ours.log")
    lines = (workdir / "ours_metrics.jsonl").read_text().splitlines()
    metrics = [json.loads(line)["data"] for line in lines]
    return [ours_row(step, m) for step, m in enumerate(metrics, start=1)], wall


# ----- TRL

def trl_installed() -> bool:
    return (TRL_SITE / "trl").is_dir() and (TRL_SITE / f"trl-{TRL_VERSION}.dist-info").is_dir()


def trl_dataset_rows(cfg, size: int) -> list[dict]:
    """The first `size` prompts of our train stream (training.trainer.data.build_train_stream: mix, seed, system prompt and
    prompt-length filter of `cfg`), as envs.to_parquet rows (prompt messages, data_source, reward_model, extra_info)."""
    from transformers import AutoTokenizer

    from envs.to_parquet import to_row
    from training.trainer.data import build_train_stream

    tokenizer = AutoTokenizer.from_pretrained(str(cfg.actor_rollout_ref.model.path))
    stream = build_train_stream(cfg, tokenizer)
    rows = []
    try:
        for item in stream:
            rows.append(to_row(item))
            if len(rows) == size:
                break
    finally:
        stream.stream.close()
    return rows


def timed_trainer_class():
    """Returns GRPOTrainer with timers around its phases (bench only): self.bench_phases[name] += seconds."""
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        def __init__(self, *args, **kwargs):
            self.bench_phases, self.bench_in_generation = defaultdict(float), False
            self.bench_last_training_step_end = time.perf_counter()
            super().__init__(*args, **kwargs)

        def _bench_time(self, name, fn, *args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.bench_phases[name] += time.perf_counter() - start

        def get_batch_samples(self, *args, **kwargs):
            return self._bench_time("data", super().get_batch_samples, *args, **kwargs)

        def _generate_and_score_completions(self, inputs):
            self.bench_in_generation = True
            try:
                return self._bench_time("gen_and_score", super()._generate_and_score_completions, inputs)
            finally:
                self.bench_in_generation = False

        def _generate(self, prompts):
            return self._bench_time("generate", super()._generate, prompts)

        def _calculate_rewards(self, *args, **kwargs):
            return self._bench_time("reward", super()._calculate_rewards, *args, **kwargs)

        def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):
            fn = super()._get_per_token_logps_and_entropies
            if not self.bench_in_generation:  # the loss's own forward (timed by compute_loss)
                return fn(model, *args, **kwargs)
            name = "ref" if self.ref_model is not None and model is self.ref_model else "old_log_prob"
            if self.ref_model is None and self.beta != 0.0:
                name = "ref"  # PEFT: the policy with its adapter off
            return self._bench_time(name, fn, model, *args, **kwargs)

        def compute_loss(self, *args, **kwargs):
            return self._bench_time("loss_forward", super().compute_loss, *args, **kwargs)

        def training_step(self, *args, **kwargs):
            try:
                return self._bench_time("training_step", super().training_step, *args, **kwargs)
            finally:
                self.bench_last_training_step_end = time.perf_counter()

    return TimedGRPOTrainer


def step_timer_callback():
    """Returns a TrainerCallback that closes each optimizer step: on_step_begin -> on_step_end is the step; the time
    after the last training_step of the step is the optimizer's (gradient clipping, AdamW, scheduler, zero_grad)."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.trainer, self.rows, self.logs, self.start = None, [], {}, None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            now = time.perf_counter()
            phases = dict(self.trainer.bench_phases)
            phases["optimizer"] = now - self.trainer.bench_last_training_step_end
            self.rows.append({"step": state.global_step, "total": now - self.start, "phases": phases})
            self.trainer.bench_phases = defaultdict(float)

        def on_log(self, args, state, control, logs=None, **kwargs):
            self.logs.setdefault(state.global_step, {}).update(logs or {})

    return StepTimer()


def trl_row(step: int, total: float, phases: dict, logs: dict) -> dict:
    """One TRL step in the bench's split: generation = generate-and-score less its ref/old log-prob forwards;
    train = training_step less the generation inside it, plus the optimizer."""
    p = {k: float(phases.get(k, 0.0)) for k in TRL_PHASES}
    generation = p["gen_and_score"] - p["ref"] - p["old_log_prob"]
    train = p["training_step"] - p["gen_and_score"] + p["optimizer"]
    p["backward"] = p["training_step"] - p["gen_and_score"] - p["loss_forward"]
    return {"arm": "trl", "step": step, "total": total, "generation": generation, "train": train,
            "other": total - generation - train, "phases": p, "data": p["data"],
            "response_length": logs.get("completions/mean_length"), "reward": logs.get("reward")}


def trl_worker(args: argparse.Namespace) -> None:
    """The TRL arm (runs in its own process with .venv-trl-site on PYTHONPATH); writes trl_steps.json in --out."""
    cfg = compose(bench_overrides(args))
    settings = trl_settings(cfg)
    import torch

    torch.set_num_threads(settings["threads"])
    import datasets
    import trl
    from trl import GRPOConfig

    from envs.trl_reward import make_trl_reward

    start = time.perf_counter()
    rows = trl_dataset_rows(cfg, settings["prompts"] * settings["steps"])
    data_seconds = time.perf_counter() - start
    config = GRPOConfig(output_dir=str(args.out / "trl_output"), **settings["config"])
    callback = step_timer_callback()
    reward = make_trl_reward(**settings["reward_options"])
    trainer = timed_trainer_class()(model=settings["model_path"], reward_funcs=reward, args=config,
                                    train_dataset=datasets.Dataset.from_list(rows), callbacks=[callback])
    callback.trainer = trainer
    init_seconds = time.perf_counter() - start - data_seconds
    trainer.train()
    steps = [trl_row(r["step"], r["total"], r["phases"], callback.logs.get(r["step"], {})) for r in callback.rows]
    (args.out / "trl_steps.json").write_text(json.dumps(
        {"trl": trl.__version__, "torch_threads": torch.get_num_threads(), "dataset_seconds": data_seconds,
         "init_seconds": init_seconds, "steps": steps}, indent=1))


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
    return argv


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
    lines = ["| arm | step | step s | generation | train/update | other | response tokens | reward |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['step']} | {r['total']:.2f} | {r['generation']:.2f} | {r['train']:.2f} | "
                     f"{r['other']:.2f} | {fmt(r['response_length'], 1)} | {fmt(r['reward'], 3)} |")
    return "\n".join(lines)


def ratio_table(ours: list[dict], trl_rows: list[dict]) -> str:
    lines = ["| steps 2..N (mean s) | ours | TRL | ours / TRL |", "|---|---:|---:|---:|"]
    for key, label in zip(SUMMARY, ["step", "generation", "train/update", "other"]):
        a, b = steady(ours, key), steady(trl_rows, key)
        lines.append(f"| {label} | {fmt(a)} | {fmt(b)} | {fmt(a / b if a is not None and b else None)}x |")
    first = [next((r["total"] for r in rows if r["step"] == 1), None) for rows in (ours, trl_rows)]
    lines.append(f"| step 1 (apart) | {fmt(first[0])} | {fmt(first[1])} | "
                 f"{fmt(first[0] / first[1] if None not in first and first[1] else None)}x |")
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
    ours, trl_rows = result["ours"]["steps"], with_generate_rest(result["trl"]["steps"])
    s = result["settings"]
    head = (f"{result['model']}, {s['prompts']} prompts x {s['config']['num_generations']} samples, "
            f"{s['config']['max_completion_length']}-token responses, prompts <= {s['max_prompt_length']} tokens, "
            f"{s['steps']} steps, fp32, {s['threads']} torch threads, TRL {result['trl'].get('trl')}; "
            f"load average {result['load_before']:.2f} before, {result['load_after']:.2f} after "
            f"({os.cpu_count()} cores). Wall (start-up included): ours {result['ours']['wall_s']:.0f} s, "
            f"TRL {result['trl']['wall_s']:.0f} s.")
    return "\n\n".join([head, step_table(ours + trl_rows), ratio_table(ours, trl_rows),
                        "Ours:\n\n" + phase_table(ours, OURS_DETAIL), "TRL:\n\n" + phase_table(trl_rows, TRL_DETAIL),
                        "Not matched:\n" + "\n".join(f"- {u}" for u in s["unmatched"])])


def main() -> None:
    args = parse_args()
    if args.trl_worker:
        trl_worker(args)
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
    result = {"model": args.model, "overrides": overrides, "settings": settings, "load_before": os.getloadavg()[0],
              "ours": {"steps": [], "wall_s": 0.0}, "trl": {"steps": [], "wall_s": 0.0}}
    print(f"work folder: {workdir}", file=sys.stderr)
    if "ours" in args.arms:
        steps, wall = run_ours(overrides, workdir)
        result["ours"] = {"steps": steps, "wall_s": wall}
        print(f"ours: {len(steps)} steps in {wall:.0f} s wall (start-up included)", file=sys.stderr)
    if "trl" in args.arms:
        steps, wall, extra = run_trl(args, settings, workdir)
        result["trl"] = {"steps": steps, "wall_s": wall, **extra}
        print(f"TRL: {len(steps)} steps in {wall:.0f} s wall (start-up included)", file=sys.stderr)
    result["load_after"] = os.getloadavg()[0]
    (workdir / "results.json").write_text(json.dumps(result, indent=1))
    if result["ours"]["steps"] and result["trl"]["steps"]:
        print(report(result))
    else:  # one arm only (--arms): its steps
        print(step_table(result["ours"]["steps"] + result["trl"]["steps"]))
    print(f"results: {workdir / 'results.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
