"""Our CPU rollout's decode loop against transformers' generate(), on the same rows, in one process.

    python bench/bench_decode.py                  # SmolLM2, the earlier CPU quickstart's first 4 prompts x 8, 48 tokens
    python bench/bench_decode.py --model tiny --repeats 1

Why: in bench/bench_trl.py --fixed-length our rollout's `gen` phase is 1.36x TRL's generate() on the same tokens.
This separates the sampler (training/cpu_backend/sampling.sample_batch) from what surrounds it in a training step
(verl's agent loop, Ray, the batch gathering, the reward). Both arms sample every row to `--tokens` (ours with
ignore_eos, generate() with min_new_tokens), at temperature 1, fp32, sdpa, the CPU backend's torch threads; the
prompts are the first `--prompts` of the quickstart's train stream (training.trainer.data.build_train_stream, via
bench/trl_arm.trl_dataset_rows), each repeated `--samples` times as a GRPO group. generate() runs the copies as
separate rows, as TRL does; ours prefills each prompt once.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/bench_decode.py` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return rows_parser(__doc__).parse_args(argv)


def rows_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a bench that samples the quickstart's rows (this one and bench/bench_precision.py)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model preset (configs/model): smollm2-135m or tiny")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8, help="copies of each prompt (a GRPO group)")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per row, in both arms")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each arm")
    return parser


def quickstart_config(model: str):
    """Returns the CPU quickstart config for `model`, composed as bench/bench_trl.py composes every arm's."""
    from bench.bench_quickstart_recipe import LETTERS_MIX
    from bench.bench_trl import TINY_MAX_PROMPT_LENGTH, compose

    # the earlier quickstart's mix (letter counts too), whose prompts BENCHMARKS.md's decode and precision rows sampled
    overrides = [f"model={model}", "trainer.device=cpu", "trainer.n_gpus_per_node=1", f"env.mix={LETTERS_MIX}"]
    if model == "tiny":
        overrides.append(f"data.max_prompt_length={TINY_MAX_PROMPT_LENGTH}")
    return compose(overrides)


def group_prompts(cfg, prompts: int, samples: int, tokenizer) -> list[list[int]]:
    """Returns the token ids of the train stream's first `prompts` prompts, each `samples` times in a row."""
    from bench.trl_arm import trl_dataset_rows

    ids = [tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False)
           for row in trl_dataset_rows(cfg, prompts)]
    return [prompt for prompt in ids for _ in range(samples)]


def quickstart_rows(model: str, prompts: int, samples: int):
    """Sets the CPU backend's torch threads; returns the model folder, its tokenizer and the rows to sample."""
    import torch
    from transformers import AutoTokenizer

    from training.launch.hardware import cpu_threads

    torch.set_num_threads(cpu_threads(1))
    cfg = quickstart_config(model)
    path = str(cfg.actor_rollout_ref.model.path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return path, tokenizer, group_prompts(cfg, prompts, samples, tokenizer)


def main() -> None:
    args = parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from training.cpu_backend.sampling import SamplingSpec, sample_batch
    from utils.gqa_sdpa import use_gqa_sdpa

    path, tokenizer, rows = quickstart_rows(args.model, args.prompts, args.samples)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    eos = tokenizer.eos_token_id
    times: dict[str, list[float]] = {"ours (sample_batch)": [], "transformers generate()": []}
    for repeat in range(args.repeats):
        use_gqa_sdpa(model)  # as the rollout server runs it
        start = time.perf_counter()
        out = sample_batch(model, rows, [args.tokens] * len(rows), SamplingSpec(temperature=1.0, ignore_eos=True),
                           {eos}, tokenizer.pad_token_id, torch.Generator().manual_seed(repeat))
        times["ours (sample_batch)"].append(time.perf_counter() - start)
        assert all(len(o.token_ids) == args.tokens for o in out)
        model.set_attn_implementation("sdpa")  # generate() as TRL runs it
        tokenizer.padding_side = "left"
        batch = tokenizer.pad({"input_ids": rows}, return_tensors="pt")
        start = time.perf_counter()
        with torch.no_grad():
            generated = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                       max_new_tokens=args.tokens, min_new_tokens=args.tokens,
                                       pad_token_id=tokenizer.pad_token_id)
        times["transformers generate()"].append(time.perf_counter() - start)
        assert generated.shape[1] == batch["input_ids"].shape[1] + args.tokens
    lengths = sorted({len(r) for r in rows})
    print(f"{args.model}: {args.prompts} prompts ({lengths[0]}-{lengths[-1]} tokens) x {args.samples} samples, "
          f"{args.tokens} new tokens each, fp32, {torch.get_num_threads()} torch threads, {args.repeats} run(s)\n")
    print("| arm | runs (s) | mean (s) |\n|---|---|---:|")
    for name, values in times.items():
        print(f"| {name} | {', '.join(f'{v:.2f}' for v in values)} | {statistics.fmean(values):.2f} |")


if __name__ == "__main__":
    main()
