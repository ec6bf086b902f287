"""How a training run scores and samples, written next to its checkpoints for the evaluator (`--from-run RUN`).

A model is only comparable with its base when both are scored as training scored it: the same reward options
(answer fallback, partial credit, answer forms, ...), system prompt, chat template options (enable_thinking) and
sampling. Each launch writes RUN/scoring.json from the
resolved config (after env.on_cpu), so the evaluator reads the values training used, not the config's GPU defaults.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

SCORING = "scoring.json"
# reward keys that say how training computed a score, not what it is: the evaluator keeps its own
HOW_KEYS = ("tokenizer_path", "timeout_s", "isolate")


def scoring_settings(cfg: DictConfig) -> dict:
    """Returns {model, system_prompt, chat_template_kwargs, reward, sampling, eval_suite} of a resolved training
    config."""
    reward = OmegaConf.to_container(cfg.env.reward, resolve=True) or {}
    template = cfg.data.get("apply_chat_template_kwargs")
    template = OmegaConf.to_container(template, resolve=True) if OmegaConf.is_config(template) else dict(template or {})
    rollout = cfg.actor_rollout_ref.rollout
    return {
        "model": str(cfg.actor_rollout_ref.model.path),
        "system_prompt": str(cfg.env.system_prompt),
        "chat_template_kwargs": template,
        "reward": {k: v for k, v in reward.items() if k not in HOW_KEYS},
        "sampling": {"temperature": float(rollout.temperature), "top_p": float(rollout.top_p),
                     "max_tokens": int(cfg.data.max_response_length)},
        "eval_suite": cfg.env.get("eval_suite"),
    }


def write_scoring(cfg: DictConfig) -> Path:
    """Writes trainer.default_local_dir/scoring.json atomically; returns its path."""
    directory = Path(str(cfg.trainer.default_local_dir))
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{SCORING}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(scoring_settings(cfg), indent=2) + "\n")
    os.replace(tmp, directory / SCORING)
    return directory / SCORING


def read_scoring(run_dir: str | Path) -> dict:
    """Returns a run's scoring.json; the error says what RUN must be and how to get the file."""
    path = Path(run_dir) / SCORING
    if not path.is_file():
        raise FileNotFoundError(f"--from-run {run_dir}: no {SCORING} there. RUN is a training run's folder "
                                "(trainer.default_local_dir, e.g. checkpoints/rg-grpo/quickstart); runs write it when "
                                "they start, so train (or resume) it once with this version")
    return json.loads(path.read_text())


def eval_overrides(settings: dict) -> list[str]:
    """The evaluator's key=value overrides that score and sample as the run did (the command line may add more)."""
    out = [f"prompt.system_prompt={json.dumps(settings['system_prompt'])}"]
    out += [f"model.chat_template_kwargs.{k}={json.dumps(v)}"
            for k, v in settings.get("chat_template_kwargs", {}).items()]
    out += [f"reward.{k}={json.dumps(v)}" for k, v in settings["reward"].items()]
    out += [f"sampling.{k}={v}" for k, v in settings["sampling"].items()]
    return out
