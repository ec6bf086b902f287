"""The attention path without flash-attn (issue 24, part 4; measured in bench/bench_logprob.py, BENCHMARKS.md).

Pins what the benchmark's conclusion rests on: verl's FSDP engine computes log-probs through
`verl.utils.torch_functional.logprobs_from_logits`, which without flash-attn takes the row-loop fallback
`logprobs_from_logits_v2`; that fallback equals verl's vectorised `logprobs_from_logits_naive` (values and
gradients), so keeping it changes no number; and sdpa over packed sequences (use_remove_padding=true, a GPU
without flash-attn) keeps sequences apart through transformers' block mask, as the padded path does.
"""

import inspect

import pytest
import torch
from verl.utils import torch_functional as verl_F


def test_contract_engine_log_probs_go_through_verls_dispatch():
    """Both layouts of FSDPEngineWithLMHead (packed and padded) call the module-level `logprobs_from_logits`,
    verl's dispatcher, which picks flash-attn's kernel, torch_npu's, or the v2 row loop."""
    import verl.workers.engine.fsdp.transformer_impl as transformer_impl

    assert transformer_impl.logprobs_from_logits is verl_F.logprobs_from_logits
    source = inspect.getsource(transformer_impl.FSDPEngineWithLMHead.prepare_model_outputs)
    assert source.count("log_probs = logprobs_from_logits(") == 2
    dispatch = inspect.getsource(verl_F.logprobs_from_logits)
    assert "output = logprobs_from_logits_v2(logits, labels)" in dispatch


def test_this_machine_takes_the_fallback():
    """No flash-attn and no NPU here: the fallback is what the CPU backend runs and what the benchmark timed."""
    assert not verl_F.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE and not verl_F.NPU_CROSS_ENTROPY_LOSS_AVAILABLE


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_fallback_equals_vectorised_values_and_gradients(dtype, tol):
    """verl's fallback (as dispatched) and its vectorised function agree with each other and with float64."""
    gen = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(300, 2048, generator=gen)).to(dtype)
    labels = torch.randint(0, 2048, (300,), generator=gen)
    results = {}
    for name, fn in (("fallback", verl_F.logprobs_from_logits), ("vectorised", verl_F.logprobs_from_logits_naive)):
        x = logits.detach().requires_grad_(True)
        out = fn(x, labels)
        (out.float() * torch.linspace(-1, 1, 300)).sum().backward()
        results[name] = (out.float(), x.grad.float())
    reference = torch.log_softmax(logits.double(), -1).gather(-1, labels[:, None]).squeeze(-1)
    torch.testing.assert_close(results["fallback"][0], results["vectorised"][0], atol=tol, rtol=tol)
    torch.testing.assert_close(results["fallback"][1], results["vectorised"][1], atol=tol, rtol=tol)
    torch.testing.assert_close(results["fallback"][0].double(), reference, atol=tol * 4, rtol=tol)


def _sequence_log_probs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return verl_F.logprobs_from_logits(logits[:-1], ids[1:])


def test_packed_sdpa_keeps_sequences_apart(tiny_model_dir):
    """The packed layout verl feeds sdpa when use_remove_padding=true (one row, position ids restarting per
    sequence, no attention mask) gives each sequence the log-probs of the padded layout; with positions that do not
    restart (no block mask) the second sequence's log-probs change, so the check can fail."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    gen = torch.Generator().manual_seed(1)
    lengths = [11, 7, 9]
    seqs = [torch.randint(3, model.config.vocab_size, (n,), generator=gen) for n in lengths]
    ids = torch.zeros(len(seqs), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = s, 1
    packed_ids = torch.cat(seqs)[None]
    restart = torch.cat([torch.arange(n) for n in lengths])[None]
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
                       use_cache=False).logits
        packed = model(input_ids=packed_ids, position_ids=restart, attention_mask=None, use_cache=False).logits[0]
        unsplit = model(input_ids=packed_ids, position_ids=torch.arange(sum(lengths))[None], attention_mask=None,
                        use_cache=False).logits[0]
    starts = [0, 11, 18]
    for i, (s, start) in enumerate(zip(seqs, starts)):
        expected = _sequence_log_probs(padded[i, :len(s)], s)
        torch.testing.assert_close(_sequence_log_probs(packed[start:start + len(s)], s), expected,
                                   atol=1e-4, rtol=1e-4)
    second = _sequence_log_probs(unsplit[11:18], seqs[1])
    assert (second - _sequence_log_probs(padded[1, :7], seqs[1])).abs().max() > 1e-2
