"""Benchmark: task stream and reward vs the reference approach, side by side in one run.

The reference approach (reasoning-gym's training/ folder, re-implemented here from its description, not its code): a
map-style dataset over Reasoning Gym's CompositeDataset that generates the item in `__getitem__`, and a reward that
regenerates `composite[index]` for every response to score it, with no guard around the scorer.

Measured per mix:
- stream: prompts/s including chat rendering (ours: TaskStream with its producer processes; reference: composite[i]);
- reward: responses/s (ours: isolated child-process scoring of the carried entry; bare: `score_answer` in-process on
  the carried entry, no guard; reference: regenerate + score);
- step: driver-side data + reward seconds for one step of 32 prompts x 8 samples, with a simulated GPU step between
  steps (ours: producers generate ahead meanwhile; reference: generation happens when the batch is asked for).

    python bench/bench_stream.py --mixes algorithmic algebra games logic --steps 3 --gpu-step-seconds 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import reasoning_gym
from reasoning_gym.composite import CompositeConfig, CompositeDataset, DatasetSpec

from envs.isolation import IsolatedScorer
from envs.mix import Mix, load_mix
from envs.prompts import build_messages, resolve_system_prompt
from envs.reward import RewardOptions
from envs.stream import TaskStream

REPO = Path(__file__).resolve().parents[1]
PROMPTS, SAMPLES = 32, 8


class ReferenceStyleDataset:
    """Map-style: every __getitem__ generates the composite item and renders it."""

    def __init__(self, mix: Mix, seed: int, size: int = 100_000):
        specs = [DatasetSpec(s.task, s.weight, dict(s.config)) for s in mix.tasks]
        self.composite = CompositeDataset(CompositeConfig(size=size, seed=seed, datasets=specs))
        self.system_prompt = resolve_system_prompt("DeepSeekZero")

    def __getitem__(self, index: int) -> dict:
        entry = self.composite[index]
        return {"raw_prompt": build_messages(entry["question"], self.system_prompt), "index": index}

    def score(self, index: int, response: str) -> float:
        entry = self.composite[index]  # regenerated for every response
        answer = reasoning_gym.utils.extract_answer(response)
        return self.composite.score_answer(answer, entry)


def responses_for(entries: list[dict]) -> list[str]:
    """SAMPLES responses per entry: half with the right answer (or a guess), half wrong."""
    out = []
    for entry in entries:
        right = entry["answer"] if entry["answer"] is not None else "guess"
        out += [f"<think>t</think><answer>{right if k % 2 else 'wrong'}</answer>" for k in range(SAMPLES)]
    return out


@dataclass
class Row:
    mix: str
    ours_prompts_s: float
    ref_prompts_s: float
    ours_reward_s: float
    bare_reward_s: float
    ref_reward_s: float
    ours_step_s: float
    ref_step_s: float


def bench_mix(name: str, steps: int, gpu_step_seconds: float, scorer: IsolatedScorer) -> Row:
    mix = load_mix(REPO / "configs" / "mix" / f"{name}.yaml")
    stream, reference = TaskStream(mix, seed=1), ReferenceStyleDataset(mix, seed=1)
    stream.start()
    iterator = iter(stream)
    warm = next(iterator)  # start producers, build datasets, start the scorer's child processes
    scorer.score_many([{"response": "<answer>x</answer>", "entry": warm["extra_info"]["entry"]}])
    reference[0]

    ours_steps, ref_steps, ours_reward, bare_reward, ref_reward = [], [], [], [], []
    ours_gen, ref_gen = [], []
    for step in range(steps):
        time.sleep(gpu_step_seconds)  # the GPU works; our producers generate ahead meanwhile
        start = time.perf_counter()
        items = [next(iterator) for _ in range(PROMPTS)]
        data_seconds = time.perf_counter() - start
        entries = [item["extra_info"]["entry"] for item in items]
        responses = responses_for(entries)
        infos = [items[k // SAMPLES]["extra_info"] for k in range(len(responses))]
        requests = [{"response": response, "entry": info["entry"], "task": info["task_name"], "config": info["config_text"],
                     "options": RewardOptions()} for response, info in zip(responses, infos)]
        start = time.perf_counter()
        scorer.score_many(requests)
        reward_seconds = time.perf_counter() - start
        ours_steps.append(data_seconds + reward_seconds)
        ours_reward.append(len(requests) / reward_seconds)
        start = time.perf_counter()
        for req in requests:  # bare: the scorer alone, in-process, on the carried entry
            ds = bare_scorer(req["task"], req["config"])  # config text: parsed once per task
            ds.score_answer(reasoning_gym.utils.extract_answer(req["response"]), req["entry"])
        bare_reward.append(len(requests) / (time.perf_counter() - start))

        base = 1 + step * PROMPTS
        start = time.perf_counter()
        ref_items = [reference[base + i] for i in range(PROMPTS)]
        ref_data = time.perf_counter() - start
        ref_entries = [reference.composite[it["index"]] for it in ref_items]
        ref_responses = responses_for(ref_entries)
        start = time.perf_counter()
        for k, response in enumerate(ref_responses):
            reference.score(ref_items[k // SAMPLES]["index"], response)
        ref_reward_seconds = time.perf_counter() - start
        ref_steps.append(ref_data + ref_reward_seconds)
        ref_reward.append(len(ref_responses) / ref_reward_seconds)
        ours_gen.append(PROMPTS / data_seconds)
        ref_gen.append(PROMPTS / ref_data)
    stream.close()
    # Sustained generation rate, no simulated GPU time: what the stream gives when read back to back.
    sustained = TaskStream(mix, seed=2)
    sustained.start()
    start, count = time.perf_counter(), 0
    for _ in sustained:
        count += 1
        if time.perf_counter() - start > 20 or count >= 5000:
            break
    ours_sustained = count / (time.perf_counter() - start)
    sustained.close()
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < 20 and count < 5000:
        reference[10_000 + count]
        count += 1
    ref_sustained = count / (time.perf_counter() - start)
    med = statistics.median
    return Row(name, ours_sustained, ref_sustained, med(ours_reward), med(bare_reward), med(ref_reward),
               med(ours_steps), med(ref_steps))


_BARE = {}


def bare_scorer(task: str, config_text: str):
    if (task, config_text) not in _BARE:
        _BARE[task, config_text] = reasoning_gym.create_dataset(task, seed=0, size=1, **json.loads(config_text))
    return _BARE[task, config_text]


def bench_verl_reward_managers(mix_name: str, repeats: int = 15) -> tuple[float, float]:
    """Responses/s of one 256-response batch through verl's naive reward manager: ours (isolated) vs bare."""
    import asyncio

    import numpy as np
    import torch
    from hydra import compose, initialize_config_module
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    from utils.offline_models import tiny_model_path

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_path())
    stream = TaskStream(REPO / "configs" / "mix" / f"{mix_name}.yaml", seed=3)
    items = stream.take(PROMPTS)
    stream.close()
    responses = responses_for([item["extra_info"]["entry"] for item in items])
    batch = []
    for k, response in enumerate(responses):
        ids = tokenizer(response, add_special_tokens=False, return_tensors="pt").input_ids
        info = items[k // SAMPLES]["extra_info"]
        batch.append(DataProto.from_single_dict({
            "prompts": torch.ones((1, 4), dtype=torch.long), "responses": ids,
            "attention_mask": torch.ones((1, 4 + ids.shape[1]), dtype=torch.long),
            "data_source": np.array([items[k // SAMPLES]["data_source"]], dtype=object),
            "reward_model": np.array([items[k // SAMPLES]["reward_model"]], dtype=object),
            "extra_info": np.array([info], dtype=object)}))
    managers = []
    for path in (REPO / "envs" / "verl_reward.py", REPO / "bench" / "bare_reward.py"):
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            config = compose(config_name="ppo_trainer", overrides=[
                f"reward.custom_reward_function.path={path}", "reward.custom_reward_function.name=compute_score"])
        managers.append(load_reward_manager(config, tokenizer))

    def run_batch(manager) -> float:
        async def gather():
            return await asyncio.gather(*[manager.run_single(item) for item in batch])

        start = time.perf_counter()
        manager.loop.run_until_complete(gather())
        return time.perf_counter() - start

    for manager in managers:
        run_batch(manager)  # warm up (child processes, scorer caches)
    times = [[], []]
    for _ in range(repeats):  # alternate, so that load changes hit both alike
        for k, manager in enumerate(managers):
            times[k].append(run_batch(manager))
    rates = [len(batch) / statistics.median(t) for t in times]
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mixes", nargs="+", default=["algorithmic", "algebra", "games", "logic"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--gpu-step-seconds", type=float, default=10.0)
    args = parser.parse_args()
    scorer = IsolatedScorer()
    rows = []
    for name in args.mixes:
        print(f"benchmarking {name} ...", flush=True)
        rows.append(bench_mix(name, args.steps, args.gpu_step_seconds, scorer))
    scorer.close()
    ours_verl, bare_verl = bench_verl_reward_managers("algorithmic")
    print("\n| mix | stream prompts/s (ours) | (reference) | reward responses/s (ours, isolated) | (bare score_answer) "
          "| (reference) | isolation overhead | step data+reward s (ours) | (reference) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        overhead = r.bare_reward_s / r.ours_reward_s - 1
        print(f"| {r.mix} | {r.ours_prompts_s:,.0f} | {r.ref_prompts_s:,.0f} | {r.ours_reward_s:,.0f} | "
              f"{r.bare_reward_s:,.0f} | {r.ref_reward_s:,.0f} | {overhead:+.0%} | {r.ours_step_s:.3f} | {r.ref_step_s:.2f} |")

    print("\nThrough verl's naive reward manager (run_single x 256, algorithmic mix, tiny tokenizer decode included):")
    print("| reward function | responses/s | overhead vs bare |\n|---|---:|---:|")
    print(f"| bare score_answer (sync, unguarded) | {bare_verl:,.0f} | - |")
    print(f"| ours (async, isolated in child processes) | {ours_verl:,.0f} | {bare_verl / ours_verl - 1:+.0%} |")


if __name__ == "__main__":
    main()
