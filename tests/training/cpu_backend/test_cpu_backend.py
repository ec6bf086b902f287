"""The CPU backend's parts, without Ray: platform, patches (contract tests against the installed verl), sampling
(against transformers' own generate and forward), the rollout server's batching, sleep and weight sync."""

import asyncio
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.cpu_backend.sampling import SamplingSpec, _cut, sample_batch

REPO = str(Path(__file__).resolve().parents[3])


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


# ---- contract tests: the verl code our two patches and one registry entry stand in for ----

def test_contract_process_group_backend_string():
    """verl builds 'cpu:gloo,{device}:{backend}' (-> 'cpu:gloo,cpu:gloo' on CPU) and TrainingWorker calls it by the
    module-level name we rebind; if either changes, training.cpu_backend.patches must be revisited."""
    import verl.workers.engine_workers as engine_workers
    from verl.utils.distributed import initialize_global_process_group_ray

    assert 'backend or f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"' in inspect.getsource(
        initialize_global_process_group_ray)
    assert "initialize_global_process_group_ray(timeout_second=None)" in inspect.getsource(
        engine_workers.TrainingWorker.__init__)
    assert "initialize_global_process_group_ray" in vars(engine_workers)


def test_contract_forward_only_engines_pin_memory():
    """verl gives forward-only FSDP2 engines CPUOffloadPolicy(pin_memory=True), looked up as a module global."""
    import verl.workers.engine.fsdp.transformer_impl as transformer_impl

    source = inspect.getsource(transformer_impl.FSDPEngine._build_fsdp_module)
    assert "offload_policy = CPUOffloadPolicy(pin_memory=True)" in source
    assert "CPUOffloadPolicy" in vars(transformer_impl)


def test_contract_rollout_adapter_table():
    """verl builds the in-worker rollout adapter from the (name, mode) table in verl.workers.rollout.base."""
    from verl.workers.rollout import base

    assert isinstance(base._ROLLOUT_REGISTRY, dict) and ("vllm", "async") in base._ROLLOUT_REGISTRY
    assert "_ROLLOUT_REGISTRY[(rollout_name, mode)]" in inspect.getsource(base.get_rollout_class)


def test_contract_verls_fsdp_engine_runs_an_unwrapped_module():
    """The single-rank CPU engine (training/cpu_backend/engine.py) returns the module unwrapped from verl's
    `_build_fsdp_module`; verl's engine must keep handling `fsdp_version(module) == 0` where a run goes: gradient
    clipping, accumulation, moves, the full state dict, forward autocast (skipped for fp32), and must keep building
    the module through that one method."""
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.workers.engine.fsdp.transformer_impl as impl

    assert "module = self._build_fsdp_module(module)" in inspect.getsource(impl.FSDPEngine._build_model_optimizer)
    assert "torch.nn.utils.clip_grad_norm_(" in inspect.getsource(impl.FSDPEngine.optimizer_step)
    assert "else:\n            yield" in inspect.getsource(impl.FSDPEngine._gradient_sync_context)
    for helper in (fsdp_utils.load_fsdp_model_to_gpu, fsdp_utils.offload_fsdp_model_to_cpu,
                   fsdp_utils.get_fsdp_full_state_dict):
        assert "fsdp_version(model) == 0" in inspect.getsource(helper), helper.__name__
    assert 'getattr(self, "_autocast_dtype", torch.bfloat16)' in inspect.getsource(
        impl.FSDPEngineWithLMHead.forward_step)
    assert fsdp_utils.fsdp_version(torch.nn.Linear(1, 1)) == 0


def test_single_rank_engine_unwraps_one_rank_only():
    """One rank without LoRA: the module as loaded (autocast from mixed_precision); two ranks or LoRA: FSDP."""
    from types import SimpleNamespace
    from unittest import mock

    from training.cpu_backend.engine import SingleRankEngineWithLMHead, keeps_plain_module

    assert keeps_plain_module(1, lora=False)
    assert not keeps_plain_module(2, lora=False) and not keeps_plain_module(1, lora=True)
    engine = object.__new__(SingleRankEngineWithLMHead)
    module = torch.nn.Linear(2, 2)
    for precision, dtype in (({"param_dtype": "fp32"}, torch.float32), ({"param_dtype": "bf16"}, torch.bfloat16)):
        engine.engine_config, engine._is_lora = SimpleNamespace(mixed_precision=precision), False
        with mock.patch("torch.distributed.get_world_size", return_value=1):
            assert engine._build_fsdp_module(module) is module
        assert engine._autocast_dtype == dtype and engine.scaler is None
    engine.engine_config = SimpleNamespace(mixed_precision={"param_dtype": "fp16"})
    with mock.patch("torch.distributed.get_world_size", return_value=1), pytest.raises(ValueError, match="fp16"):
        engine._build_fsdp_module(module)
    with mock.patch("torch.distributed.get_world_size", return_value=2), mock.patch(
            "verl.workers.engine.fsdp.transformer_impl.FSDPEngine._build_fsdp_module", return_value="sharded"):
        assert engine._build_fsdp_module(module) == "sharded"


def test_backend_registers_and_patches_only_on_cpu_platform():
    """Importing the backend registers the platform, engine, replica and adapter; patches need VERL_PLATFORM=cpu."""
    code = """
import training.cpu_backend
import verl.workers.engine_workers as ew
from verl.plugin.platform import PlatformRegistry, get_platform
from verl.utils.device import get_device_id, get_device_name, get_torch_device
from verl.workers.engine.base import EngineRegistry
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.replica import RolloutReplicaRegistry
assert PlatformRegistry.get("cpu") is not None
print(get_device_name(), get_device_id(), ew.initialize_global_process_group_ray.__module__)
print(EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__ if get_device_name() == "cpu" else "-")
print(RolloutReplicaRegistry.get("transformers").__name__, get_rollout_class("transformers").__name__)
free, total = get_torch_device().mem_get_info()
assert 0 < free <= total
"""
    on_cpu = _run_python(code, VERL_PLATFORM="cpu")
    assert on_cpu.returncode == 0, on_cpu.stderr[-3000:]
    lines = on_cpu.stdout.split("\n")
    assert lines[0] == "cpu cpu training.cpu_backend.patches"
    assert lines[1] == "SingleRankEngineWithLMHead"
    assert lines[2] == "TransformersReplica TransformersRolloutAdapter"
    elsewhere = _run_python("import training.cpu_backend, verl.workers.engine_workers as ew; "
                            "print(ew.initialize_global_process_group_ray.__module__)", VERL_PLATFORM="nvidia")
    assert elsewhere.returncode == 0, elsewhere.stderr[-3000:]
    assert elsewhere.stdout.strip() == "verl.utils.distributed"  # unpatched off the CPU platform


def test_gloo_process_group_where_verls_backend_string_fails():
    """Proves the patch is needed and works: torch rejects verl's CPU backend string, ours initialises."""
    code = """
import os, torch.distributed as dist
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29731")
try:
    dist.init_process_group(backend="cpu:gloo,cpu:gloo", rank=0, world_size=1)
    print("verl-string-ok")
except Exception as err:
    print("verl-string-fails")
if dist.is_initialized():
    dist.destroy_process_group()
from training.cpu_backend.patches import gloo_process_group
gloo_process_group()
print(dist.get_backend())
"""
    result = _run_python(code, VERL_PLATFORM="cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["verl-string-fails", "gloo"]


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


# ---- the server, as a plain object (Ray only forwards calls to it) ----

@pytest.fixture()
def server(tiny_model_dir):
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.replica import RolloutMode

    from training.cpu_backend.rollout import TransformersServer

    config = RolloutConfig(name="transformers", prompt_length=256, response_length=8, max_model_len=264,
                           free_cache_engine=True, max_num_seqs=64)
    model_config = HFModelConfig(path=str(tiny_model_dir))
    return TransformersServer(config, model_config, 0, RolloutMode.HYBRID)


def test_server_batches_concurrent_requests(server):
    prompt = list(range(5, 40))

    async def run():
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        return await asyncio.gather(*[server.generate(prompt, dict(params), f"r{i}") for i in range(6)])

    outputs = asyncio.run(run())
    assert len(outputs) == 6 and all(1 <= len(o.token_ids) <= 8 and len(o.log_probs) == len(o.token_ids)
                                     for o in outputs)
    assert server.stats["batches"] == 1 and server.stats["sequences"] == 6


def test_server_takes_ignore_eos_from_the_rollout_config(tiny_model_dir):
    """rollout.ignore_eos=true reaches every request, as verl's vLLM server applies it (bench_trl's fixed lengths)."""
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.replica import RolloutMode

    from training.cpu_backend.rollout import TransformersServer

    prompt, greedy = list(range(5, 30)), {"temperature": 0, "logprobs": True}
    lengths = []
    for ignore_eos in (False, True):
        config = RolloutConfig(name="transformers", prompt_length=256, response_length=8, max_model_len=264,
                               max_num_seqs=64, ignore_eos=ignore_eos)
        server = TransformersServer(config, HFModelConfig(path=str(tiny_model_dir)), 0, RolloutMode.HYBRID)
        first = asyncio.run(server.generate(prompt, dict(greedy), "a")).token_ids[0]
        server.eos_token_ids = {first}  # the first greedy token now ends the response, unless EOS is ignored
        lengths.append(len(asyncio.run(server.generate(prompt, dict(greedy), "b")).token_ids))
    assert lengths == [1, 8]


def test_server_sleep_releases_weights_and_sync_restores_them(server):
    from training.cpu_backend.rollout_adapter import to_wire

    state = {name: p.detach().clone() for name, p in server.model.named_parameters()}
    prompt, greedy = list(range(5, 30)), {"temperature": 0, "logprobs": True}

    async def cycle(weights):
        await server.sleep()
        assert all(p.numel() == 0 for p in server.model.parameters())
        await server.wake_up(tags=["weights"])
        server.begin_weight_update()
        server.load_weights({name: to_wire(t) for name, t in weights.items()})
        server.finish_weight_update(global_steps=7)
        await server.wake_up(tags=["kv_cache"])
        return await server.generate(prompt, dict(greedy), "x")

    async def run():
        before = await server.generate(prompt, dict(greedy), "a")
        same = await cycle(state)
        changed = await cycle({name: t + 0.5 * torch.randn_like(t) for name, t in state.items()})
        return before, same, changed

    before, same, changed = asyncio.run(run())
    assert same.token_ids == before.token_ids and same.extra_fields["global_steps"] == 7
    assert changed.token_ids != before.token_ids


def test_server_refuses_an_incomplete_weight_sync(server):
    from training.cpu_backend.rollout_adapter import to_wire

    name, tensor = next(iter(server.model.named_parameters()))
    server.begin_weight_update()
    server.load_weights({name: to_wire(tensor)})
    with pytest.raises(RuntimeError, match="missed"):
        server.finish_weight_update()
    with pytest.raises(RuntimeError, match="without complete weights"):
        asyncio.run(server.generate(list(range(5, 20)), {"temperature": 0}, "y"))


def test_wire_format_round_trips_bf16():
    from training.cpu_backend.rollout_adapter import from_wire, to_wire

    tensor = torch.randn(3, 4).to(torch.bfloat16)
    assert torch.equal(from_wire(*to_wire(tensor)), tensor)


def test_an_announced_submission_samples_alike_whatever_its_arrival(server):
    """The trainer announces a submission's size (`expect`): the server waits for all of it and samples it as one
    batch sorted by prompt and seed, so the same seeded requests give the same responses, to the bit, whether they
    arrive in one burst or in two waves and in any order. Unannounced, the two waves are two batches."""
    prompts = [list(range(5, 40)), list(range(7, 30))]
    requests = [(prompts[i % 2], 1000 + i) for i in range(6)]

    async def submit(order, pause, announce):
        if announce:
            await server.expect(len(order))
        params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
        first = [asyncio.create_task(server.generate(p, dict(params, seed=s), f"r{s}")) for p, s in order[:2]]
        await asyncio.sleep(pause)  # longer than the server's gather window: a second wave
        rest = [asyncio.create_task(server.generate(p, dict(params, seed=s), f"r{s}")) for p, s in order[2:]]
        outputs = await asyncio.gather(*first, *rest)
        return {seed: (o.token_ids, o.log_probs) for (_, seed), o in zip(order, outputs)}

    burst = asyncio.run(submit(requests, 0.0, True))
    assert server.stats["batches"] == 1
    waves = asyncio.run(submit(requests[::-1], 0.3, True))
    assert server.stats["batches"] == 2 and waves == burst
    asyncio.run(submit(requests, 0.3, False))
    assert server.stats["batches"] == 4  # unannounced: each wave sampled as it came
    assert len({tuple(tokens) for tokens, _ in burst.values()}) > 1  # seeds differ, so do the samples


def test_a_request_seed_names_its_sample():
    from training.trainer.seeding import ordered_keys, request_seed

    seeds = {request_seed(0, step, index, session) for step in (1, 2) for index in (0, 1) for session in range(4)}
    assert len(seeds) == 16 and all(0 <= s < 2 ** 63 for s in seeds)
    assert request_seed(0, 1, 5, 2) == request_seed(0, 1, 5, 2) != request_seed(1, 1, 5, 2)
    keys = ["b_1_0", "a_0_0", "c_0_0", "b_0_0", "a_1_0"]
    order = {"a": (1, 1), "b": (1, 0)}  # c: not submitted through the wrapper
    assert ordered_keys(keys, [{"k": k} for k in keys], order) == (
        ["b_0_0", "b_1_0", "a_0_0", "a_1_0", "c_0_0"], [{"k": k} for k in ["b_0_0", "b_1_0", "a_0_0", "a_1_0", "c_0_0"]])


def test_requests_are_seeded_on_the_cpu_rollout_and_where_determinism_is_asked():
    from omegaconf import OmegaConf

    from training.cpu_backend import ROLLOUT_NAME
    from training.trainer.seeding import CPU_ROLLOUT_NAME, seeds_requests

    assert CPU_ROLLOUT_NAME == ROLLOUT_NAME  # named there, not imported (the import registers the CPU backend)
    assert seeds_requests(OmegaConf.create({"name": "transformers", "full_determinism": False}))
    assert not seeds_requests(OmegaConf.create({"name": "vllm", "full_determinism": False}))
    assert seeds_requests(OmegaConf.create({"name": "vllm", "full_determinism": True}))


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


def test_server_pauses_mid_batch_and_the_aborted_request_continues_after_resume(tiny_model_dir):
    """verl's colocated async trainer: `abort_all_requests` answers the running rows "aborted" with their tokens so
    far; a request sent while paused waits; after `resume_generation` it is sampled, and the aborted request sent
    again (prompt + partial, the rest of its budget, as FullyAsyncLLMServerClient does) finishes its response."""
    import threading

    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.replica import RolloutMode

    from training.cpu_backend.rollout import TransformersServer

    config = RolloutConfig(name="transformers", prompt_length=64, response_length=48, max_model_len=112,
                           free_cache_engine=True, max_num_seqs=64)
    server = TransformersServer(config, HFModelConfig(path=str(tiny_model_dir)), 0, RolloutMode.HYBRID)
    reached, release, calls = threading.Event(), threading.Event(), []

    def hold(module, args, kwargs, output):  # the 4th forward waits until the test has asked for the abort
        calls.append(1)
        if len(calls) == 4:
            reached.set()
            release.wait(30)

    hook = server.model.register_forward_hook(hold, with_kwargs=True)
    prompt, greedy = list(range(5, 30)), {"temperature": 0, "logprobs": True, "max_tokens": 48}

    async def run():
        loop = asyncio.get_running_loop()
        first = asyncio.create_task(server.generate(prompt, dict(greedy), "a"))
        await loop.run_in_executor(None, reached.wait, 30)
        abort = asyncio.create_task(server.abort_all_requests())
        await asyncio.sleep(0.05)
        release.set()
        aborted, answer = await first, await abort
        waiting = asyncio.create_task(server.generate(list(range(9, 20)), dict(greedy, max_tokens=4), "b"))
        await asyncio.sleep(0.3)
        parked = not waiting.done()
        await server.resume_generation()
        rest = await server.generate(prompt + aborted.token_ids,
                                     dict(greedy, max_tokens=48 - len(aborted.token_ids)), "a")
        return aborted, answer, parked, await waiting, rest

    aborted, answer, parked, later, rest = asyncio.run(run())
    hook.remove()
    whole = asyncio.run(server.generate(prompt, dict(greedy), "c"))
    assert aborted.stop_reason == "aborted" and answer["aborted_count"] == 1
    assert 4 <= len(aborted.token_ids) < 48 and aborted.token_ids == whole.token_ids[:len(aborted.token_ids)]
    assert parked and later.stop_reason == "completed" and len(later.token_ids) == 4
    assert rest.stop_reason == "completed" and len(aborted.token_ids) + len(rest.token_ids) == len(whole.token_ids)
