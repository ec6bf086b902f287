"""Stage d: vLLM alone on a training run's own prompts with its rollout's sampling, timed batch by batch, to set
against the run's in-loop generation (its `timing_s/gen` and response lengths).

    python -m gpu_kit.vllm_alone --run OUT/runs/smollm2 --out DIR [--batches 4] [--train-record RECORD.json]

The run's composed config (`<run>/hydra/.hydra/config.yaml`) gives the model, the mix, seed and system prompt, the
batch size and the rollout's settings (n, temperature, top_p, top_k, lengths, dtype, memory share, eager mode, batching
limits). The prompts are the run's first `--batches` training batches, written by the project's own command
(`python -m envs.to_parquet`) and templated with the model's tokenizer (checked against the run's rollout dump); the
first batch warms the engine up and is not counted. Writes DIR/vllm_alone.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m gpu_kit.vllm_alone", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the training run's folder (its hydra/ inside)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", type=int, default=4, help="training batches to generate; the first warms up")
    parser.add_argument("--train-record", type=Path, help="the training stage's record: its gen tokens/s")
    return parser.parse_args(argv)


def model_path(path: str) -> str:
    """`offline:NAME` (the configs' offline models) through the project's command; anything else as it is."""
    if not path.startswith("offline:"):
        return path
    done = subprocess.run([sys.executable, "-m", "utils.offline_models", path.split(":", 1)[1]], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def prompts(cfg, count: int, out: Path, tokenizer) -> list[list[int]]:
    """The stream's first `count` training prompts as token ids, via `python -m envs.to_parquet`."""
    import pyarrow.parquet as parquet

    path = out / "prompts.parquet"
    subprocess.run([sys.executable, "-m", "envs.to_parquet", "--mix", str(cfg.env.mix), "--split", "train",
                    "--seed", str(cfg.env.seed), "--size", str(count), "-o", str(path),
                    "--system-prompt", str(cfg.env.system_prompt), "--no-progress"], cwd=REPO, check=True)
    rows = parquet.read_table(path).column("prompt").to_pylist()
    return [tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
            for messages in rows]


def same_as_training(run: Path, batches: list[list[list[int]]], tokenizer) -> bool | None:
    """Whether each batch's prompts, decoded as verl's rollout dump decodes them, are the ones the run trained on
    at that step (`<run>/rollouts/<step>.jsonl`); None when the run dumped none."""
    found = None
    for step, batch in enumerate(batches, start=1):
        dump = run / "rollouts" / f"{step}.jsonl"
        if dump.is_file():
            trained = {json.loads(line)["input"] for line in dump.read_text().splitlines() if line.strip()}
            ours = {tokenizer.decode(ids, skip_special_tokens=True) for ids in batch}
            found = (found is not False) and trained == ours
    return found


def main(argv=None) -> int:
    args = parse_args(argv)
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    args.out.mkdir(parents=True, exist_ok=True)
    cfg = OmegaConf.load(args.run / "hydra" / ".hydra" / "config.yaml")
    rollout, batch = cfg.actor_rollout_ref.rollout, int(cfg.data.train_batch_size)
    path = model_path(str(cfg.actor_rollout_ref.model.path))
    tokenizer = AutoTokenizer.from_pretrained(path)
    ids = prompts(cfg, batch * args.batches, args.out, tokenizer)
    batched = [ids[index * batch:(index + 1) * batch] for index in range(args.batches)]
    # the training run's sampler (utils/vllm_sampler.py; gpu_kit imports nothing of the project's): PyTorch's where
    # flashinfer is not installed
    if importlib.util.find_spec("flashinfer") is None:
        os.environ.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    print(f"VLLM_USE_FLASHINFER_SAMPLER={os.environ.get('VLLM_USE_FLASHINFER_SAMPLER', 'unset')}", flush=True)
    started = time.time()
    engine = LLM(model=path, dtype=str(rollout.dtype), gpu_memory_utilization=float(rollout.gpu_memory_utilization),
                 enforce_eager=bool(rollout.enforce_eager), max_model_len=int(rollout.prompt_length)
                 + int(rollout.response_length), max_num_batched_tokens=int(rollout.max_num_batched_tokens),
                 max_num_seqs=int(rollout.max_num_seqs), enable_chunked_prefill=bool(rollout.enable_chunked_prefill),
                 enable_prefix_caching=bool(rollout.enable_prefix_caching), seed=0)
    startup = time.time() - started
    sampling = SamplingParams(n=int(rollout.n), temperature=float(rollout.temperature), top_p=float(rollout.top_p),
                              top_k=int(rollout.top_k), max_tokens=int(rollout.response_length), logprobs=0)
    batches = []
    for index, prompt_ids in enumerate(batched):
        chunk = [TokensPrompt(prompt_token_ids=p) for p in prompt_ids]
        started = time.time()
        outputs = engine.generate(chunk, sampling, use_tqdm=False)
        seconds = time.time() - started
        tokens = sum(len(sample.token_ids) for request in outputs for sample in request.outputs)
        batches.append({"batch": index + 1, "seconds": round(seconds, 3), "tokens": tokens,
                        "tokens_per_s": round(tokens / seconds, 1)})
    timed = batches[1:] or batches
    result = {"model": path, "same_prompts_as_training": same_as_training(args.run, batched, tokenizer),
              "engine_startup_s": round(startup, 1), "prompts_per_batch": batch, "n": int(rollout.n),
              "max_tokens": int(rollout.response_length), "batches": batches,
              "timed_batches": [b["batch"] for b in timed],
              "tokens_per_s": round(sum(b["tokens"] for b in timed) / sum(b["seconds"] for b in timed), 1)}
    if args.train_record and args.train_record.is_file():
        steps = json.loads(args.train_record.read_text())["results"]["steps"]
        in_loop = [steps[str(b["batch"])]["gen_tokens_per_s"] for b in timed
                   if "gen_tokens_per_s" in steps.get(str(b["batch"]), {})]
        if in_loop:
            result["in_loop_tokens_per_s"] = round(sum(in_loop) / len(in_loop), 1)
            result["in_loop_vs_alone"] = round(result["in_loop_tokens_per_s"] / result["tokens_per_s"], 3)
    (args.out / "vllm_alone.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
