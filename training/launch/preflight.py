"""Preflight: the whole data and reward path of a training config, run on CPU with HF transformers.

It draws prompts from the real task stream through verl's collate function, renders them with the model's chat
template, samples a group of responses per prompt with `generate`, scores them with the reward function exactly as
verl loads it (reward.custom_reward_function + reward_kwargs), and prints a per-task table and a few completions.
Reads env.preflight.{prompts,samples,max_new_tokens,show,threads,audit_items}, actor_rollout_ref.rollout.{n,temperature,top_p},
data.max_response_length. Returns 0 when every stage worked.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from dataclasses import dataclass

import torch
from omegaconf import DictConfig

from training.trainer.metrics import SampleRecord, env_metrics, record_from_reward


@dataclass(frozen=True)
class Completion:
    """One sampled response and its reward dict."""

    task: str
    group: str
    prompt: str
    response: str
    tokens: int
    reward: dict


def cpu_threads(requested: int) -> int:
    """Returns the torch threads for generation: `requested` if > 0; else 1 on a machine already busier than its
    cores (competing OpenMP threads made generation ~7x slower than one thread there), else torch's default."""
    if requested > 0:
        return requested
    cores = os.cpu_count() or 1
    return 1 if os.getloadavg()[0] >= cores else torch.get_num_threads()


def draw_prompts(cfg: DictConfig, tokenizer, count: int) -> list[dict]:
    """Returns `count` stream items, fetched the way the trainer fetches them (StatefulDataLoader + verl collate)."""
    from training.trainer.data import build_train_dataloader, build_train_stream

    stream = build_train_stream(cfg, tokenizer)
    try:
        batch = next(iter(build_train_dataloader(stream, batch_size=count)))
    finally:  # its producer processes would go on generating ahead in a process that continues (tests, the pipeline)
        stream.stream.close()
    keys = ["raw_prompt", "data_source", "reward_model", "extra_info", "index"]
    return [{key: batch[key][i] for key in keys} for i in range(count)]


def render(tokenizer, messages, cfg: DictConfig) -> str:
    """Returns the prompt text as verl's agent loop renders it (chat template + generation prompt)."""
    from envs.prompts import render_prompt
    from training.trainer.data import chat_template_kwargs

    return render_prompt(tokenizer, messages, chat_template_kwargs(cfg))


def sample_group(model, tokenizer, prompts: list[str], samples: int, max_new_tokens: int, cfg: DictConfig,
                 do_sample: bool = True):
    """Returns [(response text, token count)] * samples per prompt, sampled with the rollout's temperature/top_p.

    Each prompt is prefilled once and its KV cache repeated for the group (a group shares its prompt, and prefill
    dominates CPU time); the continuation is exactly what `generate` gives on the repeated prompts.
    """
    from transformers import DynamicCache

    tokenizer.padding_side = "left"
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    rollout = cfg.actor_rollout_ref.rollout
    sampling = dict(do_sample=True, temperature=float(rollout.temperature), top_p=float(rollout.top_p)) \
        if do_sample else dict(do_sample=False)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
              past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(samples)
        out = model.generate(input_ids=ids.repeat_interleave(samples, 0), attention_mask=mask.repeat_interleave(
            samples, 0), past_key_values=cache, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
            **sampling)
    results = []
    for row in out[:, ids.shape[1]:].tolist():
        length = next((i + 1 for i, t in enumerate(row) if t == tokenizer.eos_token_id), len(row))
        results.append((tokenizer.decode(row[:length], skip_special_tokens=True), length))
    return results


def score_all(cfg: DictConfig, items: list[dict], responses: list[str]) -> list[dict]:
    """Scores responses[i] against items[i] with the reward function as verl loads it (path, name, reward_kwargs)."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    reward_fn = get_custom_reward_fn(cfg)

    async def one(item, response):
        result = reward_fn(data_source=item["data_source"], solution_str=response,
                           ground_truth=item["reward_model"]["ground_truth"], extra_info=dict(item["extra_info"]))
        return await result if asyncio.iscoroutine(result) else result

    async def everything():
        return await asyncio.gather(*(one(item, response) for item, response in zip(items, responses, strict=True)))

    results = asyncio.run(everything())
    return [r if isinstance(r, dict) else {"score": float(r), "acc": float(r)} for r in results]


def per_task_table(records: list[SampleRecord], prompt_lengths: dict[str, int]) -> str:
    """Returns the preflight table: one row per task and a total row."""
    metrics = env_metrics(records)
    tasks = sorted({r.task for r in records})
    header = (f"{'task':<28} {'samples':>7} {'reward':>7} {'acc':>6} {'answer':>7} {'flat':>6} {'resp len':>8} "
              f"{'prompt max':>10}")
    lines = [header, "-" * len(header)]
    for task, prefix in [(t, f"env/{t}") for t in tasks] + [("all", "env")]:
        lines.append(f"{task:<28} {int(metrics[prefix + '/samples']):>7} {metrics[prefix + '/reward']:>7.3f} "
                     f"{metrics[prefix + '/accuracy']:>6.3f} {metrics[prefix + '/answer_rate']:>7.3f} "
                     f"{metrics[prefix + '/zero_variance_groups']:>6.2f} {metrics[prefix + '/response_length']:>8.1f} "
                     f"{max(prompt_lengths.values()) if task == 'all' else prompt_lengths.get(task, 0):>10}")
    lines.append(f"zero-variance groups (no GRPO signal; 'flat' per task): {metrics['env/zero_variance_groups']:.2f}")
    return "\n".join(lines)


def run_preflight(cfg: DictConfig, tokenizer, reason: str) -> int:
    """Runs the preflight for a resolved, validated config; prints progress, the table and completions."""
    from transformers import AutoModelForCausalLM

    from training.trainer.data import build_validation_items

    opts = cfg.env.preflight
    samples = max(2, min(int(cfg.actor_rollout_ref.rollout.n), int(opts.samples)))
    max_new = min(int(cfg.data.max_response_length), int(opts.max_new_tokens))
    print(f"[preflight] {reason}\n[preflight] {int(opts.prompts)} prompts x {samples} samples x <= {max_new} new "
          f"tokens with HF transformers on CPU (training would use rollout.n={cfg.actor_rollout_ref.rollout.n}, "
          f"{cfg.data.max_response_length} tokens)")
    start = time.perf_counter()
    validation = build_validation_items(cfg, tokenizer)
    print(f"[preflight] validation set: {len(validation)} items from tasks "
          f"{sorted({v['extra_info']['task'] for v in validation})}")
    audit_scorers(cfg, int(opts.get("audit_items", 8)))
    items = draw_prompts(cfg, tokenizer, int(opts.prompts))
    prompts = [render(tokenizer, item["raw_prompt"], cfg) for item in items]
    prompt_lengths: dict[str, int] = {}
    for item, text in zip(items, prompts):
        task = item["extra_info"]["task"]
        prompt_lengths[task] = max(prompt_lengths.get(task, 0), len(tokenizer(text, add_special_tokens=False).input_ids))
    model = AutoModelForCausalLM.from_pretrained(cfg.actor_rollout_ref.model.path, dtype=torch.float32)
    torch.set_num_threads(cpu_threads(int(opts.get("threads", 0))))
    torch.manual_seed(int(cfg.env.seed))
    generated = sample_group(model, tokenizer, prompts, samples, max_new, cfg)
    expanded = [item for item in items for _ in range(samples)]
    rewards = score_all(cfg, expanded, [text for text, _ in generated])
    completions = [Completion(item["extra_info"]["task"], str(i // samples), prompts[i // samples], text, n, reward)
                   for i, (item, (text, n), reward) in enumerate(zip(expanded, generated, rewards, strict=True))]
    records = [record_from_reward(c.task, c.group, c.reward, c.reward["score"], c.tokens, max_new)
               for c in completions]
    print(per_task_table(records, prompt_lengths))
    show_completions(completions, int(opts.show))
    return finish(records, time.perf_counter() - start)


def audit_scorers(cfg: DictConfig, items: int) -> None:
    """Prints envs.audit's line for each task of the mix (on `items` validation items of the mix's own task configs,
    scored as env.reward scores: the gold, the wrong answers a policy finds, the gold's other forms), and a warning
    when a gold answer missed, a wrong answer scored as right, or a right answer's form did not."""
    from omegaconf import OmegaConf

    from envs.audit import audit_task, mix_tasks
    from envs.reward import RewardOptions
    from training.trainer.data import load_env_mix

    strict = RewardOptions.from_kwargs(OmegaConf.to_container(cfg.env.reward, resolve=True) or {}).strict_answers
    audits = [audit_task(key, task, config, items, int(cfg.env.seed), strict)
              for key, task, config in mix_tasks(load_env_mix(cfg))]
    for found in audits:
        print(f"[preflight] scorer audit: {found.line()}")
    if any(found.gold_missed or found.holes or found.form_problems for found in audits):
        print("[preflight] WARNING: the scorer audit found a right answer that does not score 1 (MISSED) or a wrong "
              "answer that does (HOLE); see docs/task-stream.md, 'The audit'")


def show_completions(completions: list[Completion], count: int) -> None:
    """Prints the first `count` completions of distinct prompts with their score and answer."""
    seen, shown = set(), 0
    for c in completions:
        if shown >= count or c.group in seen:
            continue
        seen.add(c.group)
        shown += 1
        print(f"\n--- {c.task}: score {c.reward['score']:.2f}, answer {c.reward.get('pred')!r}, "
              f"{c.tokens} tokens ---\n{c.response.strip()[:800]}")


def finish(records: list[SampleRecord], seconds: float) -> int:
    """Returns 0 if every response got a finite score, else 1; prints the verdict and signal warnings."""
    bad = [r for r in records if not math.isfinite(r.score)]
    if bad or not records:
        print(f"\n[preflight] FAILED: {len(bad)} non-finite scores of {len(records)} responses")
        return 1
    if not any(r.answer_found for r in records):
        signal = ("the reward option answer_fallback scores another part of them instead" if len({r.score for r in records}) > 1
                  else "so every response scores alike and GRPO gets no signal")
        print(f"\n[preflight] WARNING: no response had an <answer>...</answer> block; {signal}. Try a stronger model, "
              "env.system_prompt (e.g. 'simple'), or more new tokens.")
    print(f"\n[preflight] all checks passed in {seconds:.0f} s: config, stream, chat template, generation, reward. "
          "Without preflight=true the same command trains (on a CUDA GPU, or on the CPU backend).")
    return 0
