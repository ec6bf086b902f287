"""Checks that run before any worker starts: each problem says which key to change and to what.

`check_config` covers batch arithmetic, GPU count, model path and the mix (task names); `check_prompt_lengths`
renders a sample of the stream with the model's tokenizer and compares it with data.max_prompt_length.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf


class ConfigProblem(ValueError):
    """Raised with every problem found, one per line."""


@dataclass(frozen=True)
class BatchPlan:
    """The batch arithmetic of one GRPO step, as docs/training.md explains it."""

    prompts: int  # data.train_batch_size
    samples_per_prompt: int  # actor_rollout_ref.rollout.n
    gpus: int  # trainer.n_gpus_per_node * trainer.nnodes
    mini_batch_prompts: int  # actor.ppo_mini_batch_size (prompts; verl multiplies by n)
    micro_batch_per_gpu: int | None  # actor.ppo_micro_batch_size_per_gpu (sequences)

    @property
    def sequences(self) -> int:
        return self.prompts * self.samples_per_prompt

    @property
    def mini_batch_sequences_per_gpu(self) -> float:
        return self.mini_batch_prompts * self.samples_per_prompt / max(self.gpus, 1)

    def describe(self) -> str:
        """One line: prompts x n = sequences over GPUs, optimizer updates and accumulation steps per update."""
        updates = self.prompts // self.mini_batch_prompts if self.mini_batch_prompts else 0
        micro = self.micro_batch_per_gpu or 0
        accumulation = int(self.mini_batch_sequences_per_gpu // micro) if micro else 0
        return (f"{self.prompts} prompts x {self.samples_per_prompt} samples = {self.sequences} sequences per step on "
                f"{self.gpus} device(s); {updates} optimizer update(s) per step of {self.mini_batch_prompts} prompts "
                f"({self.mini_batch_sequences_per_gpu:g} sequences per device, {accumulation} micro-batch(es) of {micro})")


def batch_plan(cfg: DictConfig) -> BatchPlan:
    """Returns the BatchPlan of a resolved config (n_gpus_per_node must be a number)."""
    arr = cfg.actor_rollout_ref
    return BatchPlan(
        prompts=int(cfg.data.train_batch_size),
        samples_per_prompt=int(arr.rollout.n),
        gpus=int(cfg.trainer.n_gpus_per_node) * int(cfg.trainer.nnodes),
        mini_batch_prompts=int(arr.actor.ppo_mini_batch_size),
        micro_batch_per_gpu=arr.actor.get("ppo_micro_batch_size_per_gpu"),
    )


def batch_problems(cfg: DictConfig) -> list[str]:
    """Returns the batch-arithmetic problems of a resolved config, each with the fix."""
    plan, arr = batch_plan(cfg), cfg.actor_rollout_ref
    problems = []
    if plan.samples_per_prompt < 2:
        problems.append(f"actor_rollout_ref.rollout.n={plan.samples_per_prompt}: GRPO compares samples of one prompt; "
                        "set it to 2 or more (8 is usual)")
    if plan.sequences % plan.gpus:
        problems.append(f"data.train_batch_size x rollout.n = {plan.prompts} x {plan.samples_per_prompt} = "
                        f"{plan.sequences} sequences do not split over {plan.gpus} GPU(s); make the product a multiple "
                        f"of {plan.gpus} (e.g. data.train_batch_size={_round_up(plan.prompts, plan.gpus)})")
    if arr.actor.get("use_dynamic_bsz"):
        return problems
    if plan.mini_batch_prompts > plan.prompts or plan.prompts % plan.mini_batch_prompts:
        problems.append(f"actor.ppo_mini_batch_size={plan.mini_batch_prompts} (prompts) must divide "
                        f"data.train_batch_size={plan.prompts}; e.g. actor_rollout_ref.actor.ppo_mini_batch_size="
                        f"{math.gcd(plan.prompts, plan.mini_batch_prompts)}")
    per_gpu = plan.mini_batch_sequences_per_gpu
    if per_gpu != int(per_gpu):
        problems.append(f"a mini-batch of {plan.mini_batch_prompts} prompts x {plan.samples_per_prompt} samples does "
                        f"not split over {plan.gpus} GPU(s); make ppo_mini_batch_size x rollout.n a multiple of "
                        f"{plan.gpus}")
    problems += _log_prob_micro_problems(cfg, plan)
    micro = plan.micro_batch_per_gpu
    if micro is None:
        problems.append("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu is not set; set it (e.g. 4) or "
                        "enable actor.use_dynamic_bsz")
    elif per_gpu == int(per_gpu) and int(per_gpu) % int(micro):
        problems.append(f"actor.ppo_micro_batch_size_per_gpu={micro} must divide the {int(per_gpu)} sequences of a "
                        f"mini-batch per GPU; e.g. actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu="
                        f"{math.gcd(int(per_gpu), int(micro))}")
    return problems


def _log_prob_micro_problems(cfg: DictConfig, plan: BatchPlan) -> list[str]:
    """verl computes old and reference log-probs over all of a step's sequences per GPU in micro-batches of
    `log_prob_micro_batch_size_per_gpu`, which must divide them."""
    per_gpu = plan.sequences / max(plan.gpus, 1)
    problems = []
    for role in ("rollout", "ref"):
        micro = OmegaConf.select(cfg, f"actor_rollout_ref.{role}.log_prob_micro_batch_size_per_gpu")
        if micro and per_gpu == int(per_gpu) and int(per_gpu) % int(micro):
            problems.append(f"actor_rollout_ref.{role}.log_prob_micro_batch_size_per_gpu={micro} must divide the "
                            f"{int(per_gpu)} sequences of a step per GPU; e.g. actor_rollout_ref.{role}."
                            f"log_prob_micro_batch_size_per_gpu={math.gcd(int(per_gpu), int(micro))}")
    return problems


def hardware_problems(cfg: DictConfig, visible_gpus: int) -> list[str]:
    """Returns GPU-count and rollout-parallelism problems (visible_gpus: CUDA devices this process sees)."""
    problems = []
    per_node, tp = int(cfg.trainer.n_gpus_per_node), int(cfg.actor_rollout_ref.rollout.tensor_model_parallel_size)
    if per_node < 1:
        problems.append(f"trainer.n_gpus_per_node={per_node}: set it to the GPUs per node (or `auto`)")
    elif int(cfg.trainer.nnodes) == 1 and visible_gpus and per_node > visible_gpus:
        problems.append(f"trainer.n_gpus_per_node={per_node} but only {visible_gpus} GPU(s) are visible "
                        f"(CUDA_VISIBLE_DEVICES); set trainer.n_gpus_per_node={visible_gpus} or hardware=auto")
    if per_node >= 1 and (tp < 1 or per_node % tp):
        problems.append(f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} must divide "
                        f"trainer.n_gpus_per_node={per_node}; use 1 for models up to a few billion parameters")
    return problems


def model_problems(cfg: DictConfig) -> list[str]:
    """Returns problems with actor_rollout_ref.model.path: a local folder needs config.json and a tokenizer."""
    path = str(cfg.actor_rollout_ref.model.path)
    local = Path(path).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            return [f"actor_rollout_ref.model.path={path}: no config.json there; point it at a Hugging Face model "
                    "folder (e.g. the output of utils/load_fsdp_to_hf.py)"]
        return []
    if path.startswith(("/", "./", "~", "..")) or path.count("/") != 1:
        return [f"actor_rollout_ref.model.path={path}: no such folder; give a local model folder or a hub id like "
                "Qwen/Qwen2.5-0.5B-Instruct"]
    return []


def mix_problems(cfg: DictConfig) -> list[str]:
    """Returns problems loading env.mix (unknown task names, bad configs), with envs' own messages."""
    from envs.mix import load_mix, mix_path

    try:
        load_mix(mix_path(cfg.env.mix))
    except (ValueError, FileNotFoundError, KeyError) as err:
        return [f"env.mix: {err}"]
    return []


# our trainers' names in verl's registry (training/trainer/trainer.py; not imported here: it starts verl's workers)
TRAINER_MODES = {"reasoning_gym": "sync", "reasoning_gym_async": "colocated async"}


def trainer_mode_problems(cfg: DictConfig) -> list[str]:
    """Returns problems of trainer.v1.*: a mode other than ours (verl's own trainers read no task stream), an
    off-policy bound or strategy verl refuses once its workers are up, and an async bound that cannot hold a response
    over a step (every response carried over is dropped)."""
    v1 = cfg.trainer.v1
    mode = str(v1.trainer_mode)
    if mode not in TRAINER_MODES:
        return [f"trainer.v1.trainer_mode={mode}: the task stream needs one of our trainers; set it to "
                + " or ".join(f"{name} ({kind})" for name, kind in TRAINER_MODES.items())]
    threshold = OmegaConf.select(cfg, "trainer.v1.sampler.max_off_policy_threshold")
    strategy = OmegaConf.select(cfg, "trainer.v1.sampler.max_off_policy_strategy", default="drop")
    if strategy not in ("drop", "wait"):
        return [f"trainer.v1.sampler.max_off_policy_strategy={strategy}: set drop (a group older than the bound is "
                "dropped and its prompt replaced) or wait (no prompt is sent that the bound would drop)"]
    if threshold is not None and (isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1):
        return [f"trainer.v1.sampler.max_off_policy_threshold={threshold}: the bound is a whole number of steps, 1 "
                "or more (verl's default is 8), or null for no bound"]
    if mode == "reasoning_gym_async" and threshold is not None and threshold < 2 and strategy == "drop":
        return [f"trainer.v1.sampler.max_off_policy_threshold={threshold} drops every response carried into the next "
                "step, so async mode only wastes generation; set it to 2 or more (verl's default is 8), or train "
                "in sync mode (trainer.v1.trainer_mode=reasoning_gym)"]
    return []


def check_config(cfg: DictConfig, visible_gpus: int) -> list[str]:
    """Returns every problem found without loading a model (batch arithmetic, trainer mode, GPUs, model path,
    mix)."""
    return (batch_problems(cfg) + trainer_mode_problems(cfg) + hardware_problems(cfg, visible_gpus)
            + model_problems(cfg) + mix_problems(cfg))


def sample_prompt_lengths(cfg: DictConfig, tokenizer, count: int) -> dict[str, list[int]]:
    """Returns {task: [prompt token counts]} of the first `count` training prompts and, for each held-out task (which
    only the validation set holds), of its first `count` // 4 validation prompts; none filtered out."""
    from envs.stream import TaskStream
    from training.trainer.data import chat_template_kwargs, load_env_mix

    mix = load_env_mix(cfg)
    sources = [(mix, "train", count)] + [({"tasks": {task: {"weight": 1.0}}}, "validation", max(count // 4, 1))
                                         for task in mix.held_out]
    lengths: dict[str, list[int]] = {}
    for source, split, items in sources:
        stream = TaskStream(source, split=split, seed=int(cfg.env.seed), system_prompt=cfg.env.system_prompt)
        try:
            lengths.update(prompt_length_report(stream.take(items), tokenizer, chat_template_kwargs(cfg)))
        finally:
            stream.close()
    return lengths


def prompt_length_report(items: list[dict], tokenizer, chat_template_kwargs: dict | None = None
                         ) -> dict[str, list[int]]:
    """Returns {task: [prompt token counts]} for stream items rendered with the model's chat template (and its
    options, data.apply_chat_template_kwargs)."""
    from envs.prompts import render_prompt

    lengths: dict[str, list[int]] = defaultdict(list)
    for item in items:
        text = render_prompt(tokenizer, item["raw_prompt"], chat_template_kwargs)
        lengths[item["extra_info"]["task"]].append(len(tokenizer.encode(text, add_special_tokens=False)))
    return dict(lengths)


def prompt_length_problems(lengths: dict[str, list[int]], max_prompt_length: int, on_long_prompt: str) -> list[str]:
    """Returns problems for tasks whose prompts exceed data.max_prompt_length (all of them, or any with `error`)."""
    problems = []
    for task, values in sorted(lengths.items()):
        too_long = sum(v > max_prompt_length for v in values)
        if not too_long:
            continue
        if on_long_prompt == "error" or too_long == len(values):
            problems.append(f"task {task}: {too_long} of {len(values)} sampled prompts are longer than "
                            f"data.max_prompt_length={max_prompt_length} (longest {max(values)} tokens); raise "
                            f"data.max_prompt_length to at least {max(values)} or change the task config in the mix")
    return problems


def raise_if_problems(problems: list[str], what: str) -> None:
    """Raises ConfigProblem listing `problems` (nothing if the list is empty)."""
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ConfigProblem(f"{what}: {len(problems)} problem(s), nothing was started:\n{lines}")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
