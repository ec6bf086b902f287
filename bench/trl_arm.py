"""The TRL arm of bench/bench_trl.py: TRL's GRPOTrainer on the settings of one composed config, with phase timers.

`trl_settings` maps the config to GRPOConfig (pure, no TRL import); `trl_worker` trains in the bench's TRL subprocess
(TRL from .venv-trl-site on PYTHONPATH, never installed into .venv) and writes per-step phase times. Step = on_step_begin
-> on_step_end of a TrainerCallback; generation = `_generate_and_score_completions` less its reference/old log-prob
forwards (sampling, decoding, reward); train/update = `training_step` less the generation inside it (loss forward +
backward) plus the optimizer (clipping, AdamW, scheduler); other = the rest (reference log-probs, ...).
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TRL_VERSION = "1.16.0"
TRL_SITE = REPO / ".venv-trl-site"
INSTALL_COMMAND = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(TRL_SITE),
                   f"trl=={TRL_VERSION}"]
TRL_PHASES = ["generate", "reward", "ref", "old_log_prob", "gen_and_score", "loss_forward", "training_step",
              "optimizer", "data"]


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
    unmatched.append("rollout: ours (transformers) prefills a group's prompt once for its n samples, vLLM shares its "
                     "KV cache through prefix caching, both return sampling log-probs; TRL's transformers generate() "
                     "runs the n copies of each prompt as separate rows")
    if not bool(OmegaConf.select(cfg, "algorithm.rollout_correction.bypass_mode", default=False)):
        unmatched.append("old log-probs: verl recomputes them every step (old_log_prob phase) unless "
                         "algorithm.rollout_correction.bypass_mode=true (then the rollout's own log-probs serve); TRL "
                         "skips them when generation and optimizer step are aligned (one step per generation, "
                         "num_iterations=1)")
    fixed_length = bool(rollout.get("ignore_eos", False))
    if fixed_length:
        unmatched.append("rollout.ignore_eos: vLLM and ours draw an EOS and go on; TRL's generate() gets "
                         "min_new_tokens = the response length instead (EOS masked until then): the same token counts")
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
    if fixed_length:
        config["generation_kwargs"] = {"min_new_tokens": int(data.max_response_length)}
    return {"config": config, "prompts": prompts, "steps": int(cfg.trainer.total_training_steps),
            "max_prompt_length": int(data.max_prompt_length), "model_path": model_path,
            "threads": cpu_threads(ranks), "reward_options": reward, "unmatched": unmatched}


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


def trl_worker(cfg, out: Path) -> None:
    """The TRL arm on the composed config `cfg` (runs in its own process with .venv-trl-site on PYTHONPATH); writes
    trl_steps.json in `out`."""
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
    config = GRPOConfig(output_dir=str(out / "trl_output"), **settings["config"])
    callback = step_timer_callback()
    reward = make_trl_reward(**settings["reward_options"])
    trainer = timed_trainer_class()(model=settings["model_path"], reward_funcs=reward, args=config,
                                    train_dataset=datasets.Dataset.from_list(rows), callbacks=[callback])
    callback.trainer = trainer
    init_seconds = time.perf_counter() - start - data_seconds
    trainer.train()
    steps = [trl_row(r["step"], r["total"], r["phases"], callback.logs.get(r["step"], {})) for r in callback.rows]
    (out / "trl_steps.json").write_text(json.dumps(
        {"trl": trl.__version__, "torch_threads": torch.get_num_threads(), "dataset_seconds": data_seconds,
         "init_seconds": init_seconds, "steps": steps}, indent=1))
