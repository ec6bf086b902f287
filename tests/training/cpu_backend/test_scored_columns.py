"""The CPU engine's LM head on the scored columns only: the same log-probs, entropy and gradients as verl's
whole-sequence path, to the bit, and verl's path wherever a micro-batch needs every position."""

from types import SimpleNamespace
from unittest import mock

import pytest
import torch

from training.cpu_backend.engine import ScoredColumnsHead, SingleRankEngineWithLMHead, scored_columns_start


def _nested(tensors):
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def _micro_batch(vocab_size: int, prompt_lengths, response_lengths, **flags):
    """A micro-batch as verl's actor builds it for the padded (use_remove_padding=false) path."""
    from verl.utils import tensordict_utils as tu

    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab_size, (n,), generator=generator) for n in prompt_lengths]
    responses = [torch.randint(0, vocab_size, (n,), generator=generator) for n in response_lengths]
    sequences = [torch.cat(pair) for pair in zip(prompts, responses)]
    return tu.get_tensordict(
        {"input_ids": _nested(sequences), "position_ids": _nested([torch.arange(len(s)) for s in sequences]),
         "prompts": _nested(prompts), "responses": _nested(responses), "temperature": torch.ones(len(sequences))},
        non_tensor_dict={"use_remove_padding": False, "calculate_entropy": True, "pad_token_id": 0, **flags})


def _engine(cls, module):
    from verl.utils import torch_functional as verl_F

    engine = object.__new__(cls)
    engine.pad_to_length = None
    engine.engine_config = SimpleNamespace(entropy_checkpointing=False, entropy_from_logits_with_chunking=False)
    engine.compute_entropy_from_logits = verl_F.entropy_from_logits
    engine.module = module
    return engine


def _step(engine, module, micro_batch):
    """verl's forward_step body, then a PPO-like loss on the response positions; returns what it read and the grads."""
    from verl.workers.utils.padding import no_padding_2_padding

    module.zero_grad()
    inputs, output_args = engine.prepare_model_inputs(micro_batch)
    raw = module(**inputs, use_cache=False)
    output = engine.prepare_model_outputs(raw, output_args, micro_batch, None)
    log_probs = no_padding_2_padding(output["log_probs"], micro_batch)
    entropy = no_padding_2_padding(output["entropy"], micro_batch)
    mask = torch.zeros_like(log_probs, dtype=torch.bool)
    for row, length in enumerate(micro_batch["responses"].offsets().diff().tolist()):
        mask[row, :length] = True
    (-(log_probs[mask]).mean() - 0.001 * entropy[mask].mean()).backward()
    grads = {name: p.grad.clone() for name, p in module.named_parameters()}
    return log_probs[mask].detach(), entropy[mask].detach(), grads, raw.logits.shape[1]


def test_scored_columns_keep_every_bit_of_verls_padded_path(tiny_model_dir):
    """Log-probs, entropy and every parameter's gradient are bitwise verl's; the head saw fewer columns."""
    from transformers import AutoModelForCausalLM
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    module = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    micro_batch = _micro_batch(module.config.vocab_size, [9, 14, 6, 11], [7, 3, 12, 1])
    verl_result = _step(_engine(FSDPEngineWithLMHead, module), module, micro_batch)
    ours = _engine(SingleRankEngineWithLMHead, module)
    ours._scored_head = ScoredColumnsHead.install(module)
    our_result = _step(ours, module, micro_batch)

    assert verl_result[3] == 6 + 12 and our_result[3] == 6 + 12 - 5  # columns from the shortest prompt's last token
    assert torch.equal(verl_result[0], our_result[0]) and torch.equal(verl_result[1], our_result[1])
    assert verl_result[2].keys() == our_result[2].keys()
    assert [name for name in verl_result[2] if not torch.equal(verl_result[2][name], our_result[2][name])] == []
    assert module.lm_head.weight.grad.abs().sum() > 0
    # the head ran whole for a forward nobody set up
    assert module(input_ids=torch.tensor([[1, 2, 3]])).logits.shape[1] == 3


def test_scored_columns_linear_is_the_whole_heads_gradient_to_the_bit():
    """The custom backward against autograd's whole-width head, sliced afterwards: both gradients bitwise equal.
    (A head sliced before the matmul, as `logits_to_keep` does, sums the weight gradient over fewer rows: at
    SmolLM2's shapes that moved the tied embedding's gradient in the last bits on this host.)"""
    from training.cpu_backend.engine import _ScoredColumnsLinear

    torch.manual_seed(0)
    hidden = torch.randn(8, 40, 64, requires_grad=True)
    weight = torch.randn(3000, 64, requires_grad=True)
    upstream = torch.randn(8, 25, 3000)

    def grads(logits_of):
        hidden.grad = weight.grad = None
        (logits_of() * upstream).sum().backward()
        return hidden.grad.clone(), weight.grad.clone()

    whole = grads(lambda: torch.nn.functional.linear(hidden, weight)[:, 15:])
    custom = grads(lambda: _ScoredColumnsLinear.apply(hidden, weight, 15))
    assert torch.equal(whole[0], custom[0]) and torch.equal(whole[1], custom[1])
    assert custom[0][:, :15].abs().sum() == 0 and custom[0][:, 15:].abs().sum() > 0


@pytest.mark.parametrize("flags, expected", [
    ({}, 5),
    ({"use_remove_padding": True}, 0),
    ({"use_fused_kernels": True}, 0),
    ({"calculate_sum_pi_squared": True}, 0),
    ({"distillation_use_topk": True}, 0),
])
def test_scored_columns_start_only_where_verls_padded_path_reads_logits(flags, expected):
    micro_batch = _micro_batch(50, [9, 6, 11], [2, 3, 4], **flags)
    assert scored_columns_start(micro_batch) == expected
    del micro_batch["prompts"]  # SFT's whole-sequence loss names no prompts
    assert scored_columns_start(micro_batch) == 0


def test_engine_installs_the_head_on_the_plain_fp32_module_only(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    module = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    engine = object.__new__(SingleRankEngineWithLMHead)
    for precision, installed in (("fp32", True), ("bf16", False)):
        engine.engine_config, engine._is_lora = SimpleNamespace(mixed_precision={"param_dtype": precision}), False
        with mock.patch("torch.distributed.get_world_size", return_value=1):
            assert engine._build_fsdp_module(module) is module
        assert (engine._scored_head is not None) is installed
    with mock.patch("torch.distributed.get_world_size", return_value=2), mock.patch(
            "verl.workers.engine.fsdp.transformer_impl.FSDPEngine._build_fsdp_module", return_value=module):
        with mock.patch("verl.utils.fsdp_utils.fsdp_version", return_value=2):
            engine._build_fsdp_module(module)
    assert engine._scored_head is None
    assert ScoredColumnsHead.install(torch.nn.Module()) is None
