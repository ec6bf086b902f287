"""The actor's update leaves out the sequences that cannot move the weights: those whose advantage is 0 everywhere.

In GRPO a group whose samples all score alike has advantage exactly 0 on every token. verl's vanilla policy loss
is `-advantage * ratio` (clipped), so with no KL loss and no entropy bonus those tokens add exactly 0 to the
gradient, yet verl runs their forward and backward like any other (most of a CPU quickstart step's update).

The engine's side (training/zero_advantage/engine.py, `ZeroAdvantageSkipMixin` around verl's `forward_backward_batch`) takes
verl's normaliser over the whole mini-batch first (the token count `token-mean` divides by; the sequence count and
`loss_scale_factor` of the sequence modes are constants already), runs the forward and backward on the rows with a
non-zero advantage only, and hands the loss the whole mini-batch's token count. The gradient is the same sum less
terms that are exactly 0: the update is verl's up to float rounding (tests/training/test_update_skip.py). A
mini-batch with no such row takes no forward, no backward and no optimizer step (AdamW would otherwise move the
weights on zero gradients, through its momentum and weight decay); the learning-rate schedule still advances.

Rows are left out in whole micro-batches: with fixed micro-batches every rank runs the same number of them (FSDP's
collectives pair up across ranks), topped up with the shortest zero-advantage rows. This module decides from the
whole config whether a run qualifies (`skip_refusal`, said in one `[check]` line at launch); the trainer hands the
decision to the engine as the non-tensor key `skip_zero_advantage` of the update's batch, and the engine checks the
loss's own config again before it leaves anything out. No verl import here: the launch reads it before verl loads.

Not skipped: verl's recomputed old log-probs (a forward-only pass over every sequence, before the advantages exist)
where a run recomputes them; the CPU backend takes the rollout's log-probs as the old ones and has no such pass.
"""

from __future__ import annotations

import os

DATA_KEY = "skip_zero_advantage"  # non-tensor key of the update's batch: the driver's decision
CONFIG_KEY = "env.skip_zero_advantage"
METRIC_PREFIX = "update_skipped/"  # verl's trainer prefixes the actor's metrics with "actor/"


def loss_refusal(actor) -> str | None:
    """What in the actor's loss settings gives a zero-advantage token a gradient, or a normaliser that depends on a
    micro-batch's rows (None: nothing). `actor` is the config's actor_rollout_ref.actor or the ActorConfig verl binds
    into its loss (both answer `.get`): the launch refuses with it, and the engine checks again before it skips."""
    if actor.get("use_kl_loss", False):
        return ("actor_rollout_ref.actor.use_kl_loss=true gives every token a KL gradient, whatever its advantage "
                "(use_kl_loss=false to skip them)")
    if float(actor.get("entropy_coeff", 0) or 0) != 0:
        return (f"actor_rollout_ref.actor.entropy_coeff={actor.get('entropy_coeff')} gives every token an entropy "
                f"gradient, whatever its advantage (entropy_coeff=0 to skip them)")
    loss_mode = (actor.get("policy_loss") or {}).get("loss_mode", "vanilla")
    if loss_mode != "vanilla":
        return f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}: exactness is shown for vanilla only"
    if actor.get("loss_agg_mode") == "seq-mean-token-sum-norm" and actor.get("loss_scale_factor") is None:
        return ("loss_agg_mode=seq-mean-token-sum-norm without actor_rollout_ref.actor.loss_scale_factor divides by "
                "each micro-batch's padded width, which depends on its rows (set loss_scale_factor, e.g. "
                "${data.max_response_length})")
    return None


def skip_refusal(cfg) -> str | None:
    """Why this run's update cannot leave zero-advantage sequences out exactly (None: it can, and does).

    Exact means their tokens' gradient is exactly 0 and no normaliser depends on which rows a micro-batch holds."""
    actor = cfg.actor_rollout_ref.actor
    if not cfg.env.get("skip_zero_advantage", True):
        return f"{CONFIG_KEY}=false"
    if refusal := loss_refusal(actor):
        return refusal
    if str(actor.get("strategy", "fsdp")) not in ("fsdp", "fsdp2"):
        return f"actor_rollout_ref.actor.strategy={actor.strategy}: the skip is in the FSDP engine only"
    if (cfg.get("distillation") or {}).get("enabled", False):
        return "distillation is on: its loss reads every token"
    return None


def skip_line(cfg) -> str:
    """The launch's `[check]` line about the update."""
    refusal = skip_refusal(cfg)
    if refusal is None:
        return ("update: leaves out sequences whose advantage is 0 (no KL loss, no entropy bonus: their gradient is "
                f"exactly 0; {CONFIG_KEY}=false runs them)")
    return f"update: runs every sequence: {refusal}"


ENGINE_MODULE = "training.zero_advantage.engine"  # registers the CUDA engine with the skip in every verl process that loads it


def load_skip_engine(cfg) -> None:
    """Adds the engine module to VERL_USE_EXTERNAL_MODULES of every Ray worker of a CUDA run, after whatever the
    user's environment already loads there (the CPU backend's engine has the skip built in)."""
    from omegaconf import open_dict

    with open_dict(cfg):
        ray_init = cfg.ray_kwargs.ray_init
        ray_init.setdefault("runtime_env", {})
        env_vars = dict(ray_init.runtime_env.get("env_vars") or {})
        current = env_vars.get("VERL_USE_EXTERNAL_MODULES", os.environ.get("VERL_USE_EXTERNAL_MODULES", ""))
        modules = [m for m in str(current).split(",") if m.strip()]
        env_vars["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys([*modules, ENGINE_MODULE]))
        ray_init.runtime_env.env_vars = env_vars
