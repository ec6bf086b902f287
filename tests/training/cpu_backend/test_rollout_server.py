"""The CPU rollout server (training/cpu_backend/rollout.py) as a plain object (Ray only forwards calls to it):
batching, ignore_eos, sleep and weight sync, announced submissions, request seeds, pause and resume."""

import asyncio

import pytest
import torch


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
