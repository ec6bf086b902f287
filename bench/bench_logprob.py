"""What verl's no-flash-attn attention path costs: the row-loop log-prob fallback and sdpa's dense masks.

    python bench/bench_logprob.py logprob           # fallback vs vectorised, quickstart and qwen2.5-0.5b shapes
    python bench/bench_logprob.py share             # SmolLM2 micro-batch as the engine runs it: the log-probs' share
    python bench/bench_logprob.py mask              # sdpa: is_causal vs a dense padded mask vs a packed block mask,
                                                    # attention alone and one qwen2.5-0.5b-sized decoder layer

Without flash-attn, `verl.utils.torch_functional.logprobs_from_logits` falls back to `logprobs_from_logits_v2`,
a Python loop over the rows of the (tokens, vocab) logits: one logsumexp (fp32) or log_softmax (bf16) per token.
verl's vectorised function is `logprobs_from_logits_naive` (one log_softmax and one gather). Shapes: the
quickstart's CPU micro-batch (8 sequences of ~96 tokens: 48-token prompts, 48-token responses; SmolLM2's 49152
vocabulary, fp32) and the qwen2.5-0.5b preset's (16 sequences for the update, 32 for log-probs, 1536 tokens:
512 + 1024; 151936 vocabulary; bf16, what a GPU's autocast gives). The qwen shapes do not fit this machine's
memory whole: they are timed on `--sequences` sequences and scaled linearly (the loop is per row).
Times are the best of `--repeats` runs, torch threads as the process's usable cores. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUICKSTART = {"vocab": 49152, "seq_len": 96, "micro_batch": 8, "dtype": torch.float32}
QWEN = {"vocab": 151936, "seq_len": 1536, "update_micro_batch": 16, "log_prob_micro_batch": 32,
        "heads": 14, "kv_heads": 2, "head_dim": 64, "layers": 24}
SMOLLM2_ATTN = {"heads": 9, "kv_heads": 3, "head_dim": 64, "layers": 30}


def best_of(fn, repeats: int) -> float:
    """The fastest of `repeats` timed calls after one warm-up call, in seconds."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def log_prob_fns() -> dict:
    """verl's own functions: the fallback this machine takes (no flash-attn) and the vectorised one."""
    from verl.utils import torch_functional as verl_F

    if verl_F.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE:
        sys.exit("flash-attn is installed, so verl never takes the fallback: run this where it is not installed")
    return {"fallback (v2 row loop)": verl_F.logprobs_from_logits,
            "vectorised (naive)": verl_F.logprobs_from_logits_naive}


def time_log_probs(fn, tokens: int, vocab: int, dtype, repeats: int, backward: bool) -> float:
    """One call of `fn` on random (tokens, vocab) logits, forward only (no_grad) or forward + backward."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(tokens, vocab, generator=gen).to(dtype)
    labels = torch.randint(0, vocab, (tokens,), generator=gen)

    def run():
        if backward:
            x = logits.detach().requires_grad_(True)
            fn(x, labels).sum().backward()
        else:
            with torch.no_grad():
                fn(logits, labels)
    return best_of(run, repeats)


def bench_logprob(args) -> None:
    fns = log_prob_fns()
    q = QUICKSTART
    cases = [("quickstart update (fwd+bwd)", q["micro_batch"], q["seq_len"], q["vocab"], q["dtype"], True, 1),
             ("quickstart old_log_prob (fwd)", q["micro_batch"], q["seq_len"], q["vocab"], q["dtype"], False, 1)]
    for dtype in args.qwen_dtypes:
        dt = getattr(torch, dtype)
        cases += [(f"qwen2.5-0.5b update {dtype} (fwd+bwd)", args.sequences, QWEN["seq_len"], QWEN["vocab"], dt,
                   True, QWEN["update_micro_batch"] / args.sequences),
                  (f"qwen2.5-0.5b log-prob {dtype} (fwd)", args.sequences, QWEN["seq_len"], QWEN["vocab"], dt,
                   False, QWEN["log_prob_micro_batch"] / args.sequences)]
    # the loop's fixed cost per row, without the vocabulary's arithmetic: a floor for any device
    cases.append(("per-row overhead, vocab 8 (fwd+bwd)", 1, 4096, 8, torch.float32, True, 1))
    print("| shape | tokens timed | x | " + " | ".join(fns) + " | fallback / vectorised |")
    print("| --- | ---: | ---: | " + " | ".join("---:" for _ in fns) + " | ---: |")
    for name, seqs, seq_len, vocab, dt, backward, scale in cases:
        times = {k: time_log_probs(fn, seqs * seq_len, vocab, dt, args.repeats, backward) for k, fn in fns.items()}
        slow, fast = times.values()
        cells = " | ".join(f"{t * scale:.3f} s" for t in times.values())
        last = times
        print(f"| {name} | {seqs * seq_len} | {scale:g} | {cells} | {slow / fast:.2f} |", flush=True)
    over = last["fallback (v2 row loop)"] / 4096 * 1e6
    print(f"\nfallback loop overhead: {over:.1f} us per row (fwd+bwd, vocab 8) -> "
          f"{over * QWEN['update_micro_batch'] * QWEN['seq_len'] / 1e6:.2f} s per qwen2.5-0.5b update micro-batch "
          f"({QWEN['update_micro_batch'] * QWEN['seq_len']} rows) before any arithmetic")


def engine_micro_batch(vocab: int, lengths: list[int], gen: torch.Generator):
    """The padded inputs verl's FSDP engine builds with use_remove_padding=false: ids padded to the longest
    sequence, a 2D attention mask (sdpa turns it into a dense 4D mask), per-sequence position ids."""
    batch, width = len(lengths), max(lengths)
    ids = torch.zeros(batch, width, dtype=torch.long)
    mask = torch.zeros(batch, width, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(0, vocab, (n,), generator=gen)
        mask[i, :n] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def engine_forward(model, ids, mask, positions, lengths, log_probs_fn, backward: bool) -> dict:
    """Forward (and backward) the way FSDPEngineWithLMHead.prepare_model_outputs does without remove-padding:
    logits narrowed to each sequence and concatenated, entropy from the padded logits, log-probs of the rolled
    labels. Returns seconds spent in the model and in the log-prob call."""
    start = time.perf_counter()
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits
    entropy = torch.logsumexp(logits, -1) - (F.softmax(logits, -1) * logits).sum(-1)  # verl_F.entropy_from_logits
    flat = torch.cat([logits[i, :n] for i, n in enumerate(lengths)])
    labels = torch.roll(torch.cat([ids[i, :n] for i, n in enumerate(lengths)]), shifts=-1)
    model_s = time.perf_counter() - start
    start = time.perf_counter()
    log_probs = log_probs_fn(flat, labels)
    lp_s = time.perf_counter() - start
    if backward:
        loss = -log_probs.mean() - 0.001 * entropy.mean()
        start = time.perf_counter()
        loss.backward()
        model_s += time.perf_counter() - start
        model.zero_grad(set_to_none=True)
    return {"total": model_s + lp_s, "log_probs_fwd": lp_s}


def bench_share(args) -> None:
    from transformers import AutoModelForCausalLM

    from utils.offline_models import prepare_smollm2

    model = AutoModelForCausalLM.from_pretrained(prepare_smollm2(), dtype=torch.float32, attn_implementation="sdpa")
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    q = QUICKSTART
    lengths = [q["seq_len"] - 8 + (i * 3) % 9 for i in range(q["micro_batch"])]  # 88..96 tokens, as in a step
    ids, mask, positions = engine_micro_batch(vocab, lengths, gen)
    tokens = sum(lengths)
    print(f"SmolLM2-135M fp32 sdpa, one micro-batch of {len(lengths)} sequences, {tokens} tokens, padded to "
          f"{max(lengths)}; best of {args.repeats}\n")
    print("| pass | log-prob function | micro-batch total | log-prob call alone | share |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, fn in log_prob_fns().items():
        for backward in (True, False):
            model.train(backward)
            ctx = torch.enable_grad if backward else torch.no_grad

            def run():
                with ctx():
                    return engine_forward(model, ids, mask, positions, lengths, fn, backward)
            total = best_of(lambda: run()["total"], args.repeats)
            alone = time_log_probs(fn, tokens, vocab, torch.float32, args.repeats, backward)
            phase = "update_actor (fwd+bwd)" if backward else "old_log_prob (fwd)"
            print(f"| {phase} | {name} | {total:.3f} s | {alone:.3f} s | {alone / total:.1%} |", flush=True)


def time_sdpa(batch: int, heads: int, kv_heads: int, head_dim: int, q_len: int, mask, repeats: int) -> float:
    """sdpa forward + backward as transformers calls it (GQA), with `mask` or is_causal when None."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, q_len, head_dim, generator=gen)
    k = torch.randn(batch, kv_heads, q_len, head_dim, generator=gen)
    v = torch.randn(batch, kv_heads, q_len, head_dim, generator=gen)

    def run():
        qq, kk, vv = (t.detach().requires_grad_(True) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask, is_causal=mask is None, enable_gqa=True)
        out.sum().backward()
    return best_of(run, repeats)


def causal_mask(batch: int, lengths: list[list[int]], width: int, packed: bool):
    """transformers' own create_causal_mask for sdpa: padded (2D mask given) or packed (position ids restart)."""
    from transformers import Qwen2Config
    from transformers.masking_utils import create_causal_mask

    config = Qwen2Config(num_attention_heads=QWEN["heads"], num_key_value_heads=QWEN["kv_heads"], hidden_size=896)
    config._attn_implementation = "sdpa"
    embeds = torch.zeros(batch, width, 1)
    if packed:
        positions = torch.cat([torch.arange(n) for row in lengths for n in row]).view(batch, width)
        return create_causal_mask(config, embeds, None, None, position_ids=positions)
    mask2d = torch.zeros(batch, width, dtype=torch.long)
    for i, row in enumerate(lengths):
        mask2d[i, :row[0]] = 1
    return create_causal_mask(config, embeds, mask2d, None, position_ids=None)


def layer_step(model, batch: int, width: int, packed: bool, repeats: int) -> float:
    """One forward + backward of `model` (Qwen2 decoder layers at the 0.5B's width) on `batch` x `width` tokens as
    the engine feeds it: padded with a 2D mask (last row 256 short) or packed in one row with restarting positions."""
    gen = torch.Generator().manual_seed(0)
    if packed:
        ids = torch.randint(0, model.config.vocab_size, (1, batch * width), generator=gen)
        positions = torch.arange(width).repeat(batch).unsqueeze(0)
        inputs = {"input_ids": ids, "position_ids": positions, "attention_mask": None}
    else:
        ids = torch.randint(0, model.config.vocab_size, (batch, width), generator=gen)
        mask = torch.ones(batch, width, dtype=torch.long)
        mask[-1, width - 256:] = 0
        inputs = {"input_ids": ids, "position_ids": (mask.cumsum(-1) - 1).clamp(min=0), "attention_mask": mask}

    def run():
        model(**inputs, use_cache=False).logits.float().mean().backward()
        model.zero_grad(set_to_none=True)
    return best_of(run, repeats)


def bench_mask(args) -> None:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    a, L = QWEN, QWEN["seq_len"]
    print(f"qwen2.5-0.5b attention ({a['heads']} heads, {a['kv_heads']} kv heads, dim {a['head_dim']}), fp32, best "
          f"of {args.repeats}; sequences of {L} tokens; the preset's update micro-batch is {a['update_micro_batch']}\n")
    print("| sequences | layout | mask (transformers' create_causal_mask) | mask build | sdpa, 1 layer (fwd+bwd) |"
          " decoder layer (fwd+bwd) |")
    print("| ---: | --- | --- | ---: | ---: | ---: |")
    causal_mask(1, [[8]], 8, False)  # imports and first-call set-up outside the timings
    config = Qwen2Config(vocab_size=256, hidden_size=896, intermediate_size=4864, num_hidden_layers=1,
                         num_attention_heads=a["heads"], num_key_value_heads=a["kv_heads"], tie_word_embeddings=True)
    config._attn_implementation = "sdpa"
    model = Qwen2ForCausalLM(config)
    for n in args.mask_sequences:
        full, short = [[L]] * n, [[L]] * (n - 1) + [[L - 256]]
        for label, batch, width, lengths, packed in (("padded, no padding", n, L, full, False),
                                                     ("padded, last row 256 short", n, L, short, False),
                                                     ("packed (remove_padding)", 1, n * L, [[L] * n], True)):
            start = time.perf_counter()
            mask = causal_mask(batch, lengths, width, packed)
            build = time.perf_counter() - start
            desc = "none: is_causal" if mask is None else f"{tuple(mask.shape)} {str(mask.dtype).split('.')[-1]}"
            attn = time_sdpa(batch, a["heads"], a["kv_heads"], a["head_dim"], width, mask, args.repeats)
            layer = "-" if label == "padded, no padding" else \
                f"{layer_step(model, n, L, packed, args.repeats):.2f} s"
            print(f"| {n} | {label} | {desc} | {build * 1e3:.1f} ms | {attn:.3f} s | {layer} |", flush=True)
    s, q = SMOLLM2_ATTN, QUICKSTART
    lengths = [[q["seq_len"] - 8 + (i * 3) % 9] for i in range(q["micro_batch"])]
    mask = causal_mask(q["micro_batch"], lengths, q["seq_len"], False)
    print(f"\nquickstart micro-batch (SmolLM2: {s['heads']} heads, {s['kv_heads']} kv heads, {q['micro_batch']} x "
          f"{q['seq_len']} tokens), sdpa fwd+bwd of one layer:")
    for label, m in (("dense padded mask " + str(tuple(mask.shape)), mask), ("is_causal, no mask", None)):
        attn = time_sdpa(q["micro_batch"], s["heads"], s["kv_heads"], s["head_dim"], q["seq_len"], m, args.repeats)
        print(f"- {label}: {attn * 1e3:.1f} ms (x{s['layers']} layers: {attn * s['layers']:.2f} s)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["logprob", "share", "mask"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sequences", type=int, default=1, help="qwen-sized sequences timed (then scaled)")
    parser.add_argument("--mask-sequences", type=int, nargs="+", default=[1, 2, 4],
                        help="qwen-sized sequences per micro-batch in the mask comparison")
    parser.add_argument("--qwen-dtypes", nargs="+", default=["bfloat16", "float32"])
    args = parser.parse_args(argv)
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    {"logprob": bench_logprob, "share": bench_share, "mask": bench_mask}[args.what](args)


if __name__ == "__main__":
    main()
