"""The CPU rollout's sampler (training/cpu_backend/sampling.py) against transformers' own generate and forward:
greedy and seeded tokens, log-probs, shared prefill, EOS, ignore_eos, and a batch stopped mid-way."""

import pytest
import torch

from training.cpu_backend.sampling import SamplingSpec, _cut, sample_batch


# ---- sampling ----

@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    return model.eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def _prompts(tokenizer) -> list[list[int]]:
    texts = ["What is 2 + 3?", "Spell the word 'gym' backwards, then explain why in one short sentence please."]
    return [tokenizer.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                          tokenize=True, return_dict=False) for t in texts]


def test_greedy_batch_matches_transformers_generate(tiny_lm):
    """Left-padded batch of prompts of different lengths: same tokens as HF generate on each prompt alone."""
    model, tokenizer = tiny_lm
    prompts = _prompts(tokenizer)
    assert len(prompts[0]) != len(prompts[1])
    sampled = sample_batch(model, prompts, [12, 12], SamplingSpec(temperature=0), eos_token_ids={-1},
                           pad_token_id=tokenizer.pad_token_id)
    for prompt, out in zip(prompts, sampled):
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                   pad_token_id=tokenizer.pad_token_id)[0, len(prompt):].tolist()
        assert out.token_ids == reference


def test_a_group_shares_its_prefill(tiny_lm):
    """n copies of a prompt (a GRPO group) are prefilled once; each row still samples on its own."""
    model, tokenizer = tiny_lm
    prompts = _prompts(tokenizer)
    group = [prompts[0]] * 3 + [prompts[1]] * 2
    greedy = sample_batch(model, group, [10] * 5, SamplingSpec(temperature=0), {-1}, tokenizer.pad_token_id)
    alone = sample_batch(model, prompts, [10, 10], SamplingSpec(temperature=0), {-1}, tokenizer.pad_token_id)
    assert [s.token_ids for s in greedy] == [alone[0].token_ids] * 3 + [alone[1].token_ids] * 2
    sampled = sample_batch(model, group, [10] * 5, SamplingSpec(temperature=1.0), {-1}, tokenizer.pad_token_id,
                           torch.Generator().manual_seed(0))
    assert len({tuple(s.token_ids) for s in sampled[:3]}) > 1  # the copies do not sample alike
    for prompt, out in zip(group, sampled):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1:-1].float()
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


def test_gqa_attention_samples_the_same_bits_as_transformers_sdpa(tiny_model_dir):
    """The rollout server's attention (`use_gqa_sdpa`: key/value heads read in place) gives transformers' sdpa's
    tokens and log-probs to the bit, on a left-padded batch of groups with per-row seeds, so switching it on does not
    change what a run of a seed samples (the quickstart's five seeds stand). Other attention is left alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from utils.gqa_sdpa import GQA_SDPA, use_gqa_sdpa

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    model.eval()
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # grouped-query heads
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = _prompts(tokenizer)
    group, seeds = [prompts[0]] * 3 + [prompts[1]] * 3, [11, 12, 13, 14, 15, 16]

    def sample():
        return [(s.token_ids, s.log_probs) for s in sample_batch(
            model, group, [16] * 6, SamplingSpec(temperature=1.0), {-1}, tokenizer.pad_token_id, seeds=seeds)]

    sdpa = sample()
    assert use_gqa_sdpa(model) and model.config._attn_implementation == GQA_SDPA
    assert sample() == sdpa
    eager = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="eager")
    assert not use_gqa_sdpa(eager) and eager.config._attn_implementation == "eager"


def test_log_probs_are_the_actors(tiny_lm):
    """Each sampled token's log-prob equals log_softmax(logits / T) of a full forward over prompt + response, the
    quantity verl's actor computes (so training/rollout_probs_diff stays ~0)."""
    model, tokenizer = tiny_lm
    prompts = _prompts(tokenizer)
    spec = SamplingSpec(temperature=0.7, top_p=0.9, top_k=50)
    sampled = sample_batch(model, prompts, [10, 16], spec, {-1}, tokenizer.pad_token_id, torch.Generator().manual_seed(1))
    assert [len(s.token_ids) for s in sampled] == [10, 16]  # each row's own limit
    for prompt, out in zip(prompts, sampled):
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(prompt) - 1:-1].float() / spec.temperature
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


def test_top_k_one_is_greedy_and_eos_ends_the_response(tiny_lm):
    model, tokenizer = tiny_lm
    prompts = _prompts(tokenizer)
    greedy = sample_batch(model, prompts, [8, 8], SamplingSpec(temperature=0), {-1}, tokenizer.pad_token_id)
    top1 = sample_batch(model, prompts, [8, 8], SamplingSpec(temperature=1.0, top_k=1), {-1}, tokenizer.pad_token_id,
                        torch.Generator().manual_seed(3))
    assert [s.token_ids for s in top1] == [s.token_ids for s in greedy]
    stop = greedy[0].token_ids[3]  # make the 4th greedy token of row 0 an EOS: it ends there, EOS included
    stopped = sample_batch(model, prompts[:1], [8], SamplingSpec(temperature=0), {stop}, tokenizer.pad_token_id)[0]
    first = greedy[0].token_ids.index(stop)
    assert stopped.token_ids == greedy[0].token_ids[: first + 1] and stopped.finished_by_eos


def test_ignore_eos_samples_to_the_limit_through_an_eos(tiny_lm):
    """vLLM's ignore_eos (verl's rollout.ignore_eos): an EOS drawn on the way is kept and the row goes on."""
    model, tokenizer = tiny_lm
    prompts = _prompts(tokenizer)
    greedy = sample_batch(model, prompts[:1], [8], SamplingSpec(temperature=0), {-1}, tokenizer.pad_token_id)[0]
    stop = greedy.token_ids[3]
    on = sample_batch(model, prompts[:1], [8], SamplingSpec(temperature=0, ignore_eos=True), {stop},
                      tokenizer.pad_token_id)[0]
    assert on.token_ids == greedy.token_ids and len(on.token_ids) == 8 and not on.finished_by_eos


def test_cut_keeps_the_first_eos_and_the_limit():
    assert _cut([5, 6, 2, 7], [0.1, 0.2, 0.3, 0.4], 4, {2}).token_ids == [5, 6, 2]
    assert _cut([5, 6, 7, 8], [0.1] * 4, 3, {2}).token_ids == [5, 6, 7]


def test_sampling_spec_follows_vllm_conventions():
    spec = SamplingSpec.from_params({"temperature": 0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
                                     "logprobs": True})
    assert spec == SamplingSpec(temperature=0.0, top_p=1.0, top_k=-1, repetition_penalty=1.0, ignore_eos=False)
    assert SamplingSpec.from_params({"ignore_eos": True}).ignore_eos




def test_a_stopped_batch_returns_what_each_row_has_and_finished_rows_are_answered_as_they_stop(tiny_lm):
    """Partial rollout's sampler: `on_finished` sees each row as it stops (the same response the batch returns);
    once `stop` is set, the rows still running come back `aborted` with a prefix of what they would have sampled."""
    import threading

    model, tokenizer = tiny_lm
    prompts = _prompts(tokenizer)
    greedy = SamplingSpec(temperature=0)
    whole = sample_batch(model, prompts, [3, 40], greedy, {-1}, tokenizer.pad_token_id)
    stop, seen = threading.Event(), {}

    def finished(row, sampled):
        seen[row] = sampled
        stop.set()  # the short row stops at 3 tokens: the long one is stopped there too

    cut = sample_batch(model, prompts, [3, 40], greedy, {-1}, tokenizer.pad_token_id, stop=stop, on_finished=finished)
    assert list(seen) == [0] and seen[0].token_ids == cut[0].token_ids == whole[0].token_ids
    assert not cut[0].aborted and cut[1].aborted and len(whole[1].token_ids) == 40
    assert 3 <= len(cut[1].token_ids) < 40 and cut[1].token_ids == whole[1].token_ids[:len(cut[1].token_ids)]
    assert len(cut[1].log_probs) == len(cut[1].token_ids)
