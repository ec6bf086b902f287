"""The actor's update with and without the zero-advantage skip, on the same batches, in one process.

    python bench/bench_update_skip.py                       # SmolLM2-135M at the CPU quickstart's shape
    python bench/bench_update_skip.py --zero-share 0.8 --repeats 3
    python bench/bench_update_skip.py --model tiny --repeats 1

The CPU backend's real engine (training/cpu_backend/engine.py, verl's FSDP engine on one gloo rank) and verl's
real loss (`ppo_loss`, token-mean, no KL, no entropy bonus), built as the quickstart's config says (lr, micro-batch,
fp32, foreach AdamW). A batch is the quickstart's step: 16 prompts of the train stream x 4 samples, responses of 4-32
random tokens, advantages N(0, 1) per token in the groups that differ and exactly 0 in the `--zero-share` that do
not (whole groups, as a zero-variance group's). Each repeat times one update of the same batch with the skip off,
then on, from the same weights (the arms alternate, so the host's drift falls on both). Prints seconds per arm, the
ratio, the share of sequences and tokens the skip left out, and how far apart the two arms' weights end (they should
agree to float rounding). `VERL_PLATFORM=cpu` is set here: run it as its own process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

os.environ.update(VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="training.cpu_backend")
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/...` puts bench/ first; our packages live at the root
    sys.path.insert(0, str(REPO))

FP32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="model preset (configs/model): smollm2-135m or tiny")
    parser.add_argument("--zero-share", type=float, default=0.6,
                        help="share of groups whose advantage is 0 (a CPU quickstart step: 0.38-0.81)")
    parser.add_argument("--repeats", type=int, default=3, help="timed updates per arm (one untimed first)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the CPU actor uses the cores)")
    return parser.parse_args(argv)


def build_engine(model_dir: str, lr: float, weight_decay: float = 0.01, clip_grad: float = 1.0,
                 foreach: bool = True):
    """The CPU backend's actor engine for `model_dir`, as verl's worker builds it (needs the gloo group)."""
    from verl.trainer.config.config import CheckpointConfig
    from verl.workers.config import FSDPEngineConfig, FSDPOptimizerConfig, HFModelConfig
    from verl.workers.engine.base import EngineRegistry

    model = HFModelConfig(path=model_dir, override_config={"attn_implementation": "sdpa"})
    model.model_type = "language_model"
    optimizer = FSDPOptimizerConfig(lr=lr, weight_decay=weight_decay, clip_grad=clip_grad, total_training_steps=10,
                                    override_optimizer_config={"foreach": True} if foreach else None)
    engine = EngineRegistry.new(model_type="language_model", backend="fsdp2", model_config=model,
                                engine_config=FSDPEngineConfig(strategy="fsdp2", mixed_precision=dict(FP32)),
                                optimizer_config=optimizer, checkpoint_config=CheckpointConfig())
    engine.initialize()
    return engine


def ppo_loss_function(loss_agg_mode: str, rows: int, micro: int, loss_scale_factor: int | None = None):
    """verl's PPO loss as its worker binds it: no KL loss, no entropy bonus (the skip's condition)."""
    from verl.workers.config import FSDPActorConfig
    from verl.workers.utils.losses import ppo_loss

    config = FSDPActorConfig(strategy="fsdp2", ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=micro,
                             loss_agg_mode=loss_agg_mode, use_kl_loss=False, entropy_coeff=0.0,
                             loss_scale_factor=loss_scale_factor, use_dynamic_bsz=False, rollout_n=1)
    return partial(ppo_loss, config=config)


def update_batch(prompts, response_lengths, advantages, micro: int, skip: bool, vocab_size: int, seed: int = 0):
    """A mini-batch in the layout verl's v1 trainer hands the actor's engine: nested prompts, responses, masks,
    advantages and old log-probs (away from the current ones, so that ratios differ from 1), one row per sequence."""
    import torch
    from verl.utils import tensordict_utils as tu

    generator = torch.Generator().manual_seed(seed)
    responses = [torch.randint(1, vocab_size, (n,), generator=generator) for n in response_lengths]
    sequences = [torch.cat(pair) for pair in zip(prompts, responses)]
    old_log_probs = [-torch.rand(n, generator=generator) * 8 for n in response_lengths]
    masks = [torch.ones(n, dtype=torch.int64) for n in response_lengths]

    def nested(tensors):
        return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)

    return tu.get_tensordict(
        {"input_ids": nested(sequences), "position_ids": nested([torch.arange(len(s)) for s in sequences]),
         "prompts": nested(prompts), "responses": nested(responses), "response_mask": nested(masks),
         "loss_mask": nested(masks), "advantages": nested(advantages), "old_log_probs": nested(old_log_probs)},
        non_tensor_dict={"skip_zero_advantage": skip, "calculate_entropy": False, "global_batch_size": len(prompts),
                         "temperature": 1.0, "use_remove_padding": False, "use_dynamic_bsz": False,
                         "micro_batch_size_per_gpu": micro, "use_fused_kernels": False, "pad_token_id": 0})


def quickstart_batch(cfg, zero_share: float):
    """The quickstart step's shape: its prompts (train stream, chat template), rollout.n samples, 4-32 tokens each."""
    import torch
    from transformers import AutoTokenizer

    from training.trainer.data import build_train_stream

    tokenizer = AutoTokenizer.from_pretrained(str(cfg.actor_rollout_ref.model.path))
    stream = iter(build_train_stream(cfg, tokenizer))
    n, prompts_per_step = int(cfg.actor_rollout_ref.rollout.n), int(cfg.data.train_batch_size)
    generator = torch.Generator().manual_seed(1)
    prompts, lengths, advantages = [], [], []
    flat_groups = round(zero_share * prompts_per_step)
    for group in range(prompts_per_step):
        item = next(stream)
        text = tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, tokenize=False)
        ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"])
        for _ in range(n):
            length = int(torch.randint(4, int(cfg.data.max_response_length) + 1, (1,), generator=generator))
            prompts.append(ids)
            lengths.append(length)
            advantages.append(torch.zeros(length) if group < flat_groups else torch.randn(length, generator=generator))
    micro = int(cfg.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu)
    return prompts, lengths, advantages, micro, len(tokenizer)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    import torch.distributed as dist

    from bench.bench_decode import quickstart_config

    torch.set_num_threads(args.threads)
    cfg = quickstart_config(args.model)
    path, lr = str(cfg.actor_rollout_ref.model.path), float(cfg.actor_rollout_ref.actor.optim.lr)
    prompts, lengths, advantages, micro, vocab_size = quickstart_batch(cfg, args.zero_share)
    loss = ppo_loss_function("token-mean", len(prompts), micro)
    seconds: dict[str, list[float]] = {"off": [], "on": []}
    with tempfile.NamedTemporaryFile() as store:
        dist.init_process_group("gloo", init_method=f"file://{store.name}", rank=0, world_size=1)
        engines = {arm: build_engine(path, lr) for arm in seconds}
        start = {name: p.detach().clone() for name, p in engines["off"].module.named_parameters()}
        for arm in seconds:  # both start from the same weights
            for name, p in engines[arm].module.named_parameters():
                p.data.copy_(start[name])
        skipped = None
        for repeat in range(args.repeats + 1):
            for arm, engine in engines.items():
                data = update_batch(prompts, lengths, advantages, micro, skip=arm == "on", vocab_size=vocab_size)
                began = time.perf_counter()
                with engine.train_mode():
                    output = engine.train_batch(data, loss)
                if repeat:  # the first update of each arm warms up (allocations, AdamW's moments)
                    seconds[arm].append(time.perf_counter() - began)
                if arm == "on":
                    skipped = output["metrics"]
            print(f"repeat {repeat}: off {seconds['off'][-1] if repeat else 0:.2f} s, "
                  f"on {seconds['on'][-1] if repeat else 0:.2f} s", file=sys.stderr, flush=True)
        apart = max(float((a.detach() - b.detach()).abs().max())
                    for a, b in zip(engines["off"].module.parameters(), engines["on"].module.parameters()))
        moved = max(float((p.detach() - start[name]).abs().max())
                    for name, p in engines["off"].module.named_parameters())
        dist.destroy_process_group()
    off, on = statistics.median(seconds["off"]), statistics.median(seconds["on"])
    tokens = sum(len(p) + n for p, n in zip(prompts, lengths))
    print(f"{args.model}: {len(prompts)} sequences ({tokens} tokens, {sum(lengths)} response), micro-batches of "
          f"{micro}, {args.zero_share:.0%} of groups with advantage 0; {args.repeats} timed update(s) per arm after "
          f"one untimed, {args.threads} threads\n")
    print("| arm | update s (median) | each | sequences left out | tokens left out |")
    print("|---|---:|---|---:|---:|")
    print(f"| skip off (verl) | {off:.2f} | {', '.join(f'{s:.2f}' for s in seconds['off'])} | 0% | 0% |")
    print(f"| skip on | {on:.2f} | {', '.join(f'{s:.2f}' for s in seconds['on'])} | "
          f"{skipped['update_skipped/sequences'][0]:.0%} | {skipped['update_skipped/tokens'][0]:.0%} |")
    print(f"\non / off: {on / off:.2f}x; after {args.repeats + 1} updates the arms' weights differ by at most "
          f"{apart:.1e} (the updates moved them by up to {moved:.1e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
