"""The task stream as verl's dataset: determinism, disjoint splits, workers, resume, prompts, curriculum."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from verl import DataProto
from verl.utils.dataset.rl_dataset import collate_fn

from envs.splits import SPLITS, question_owner
from envs.stream import TaskStream, build_validation_set
from envs.tasks import all_tasks

REPO = Path(__file__).resolve().parents[2]
EASY = REPO / "configs" / "mix" / "easy.yaml"


def digest(item) -> str:
    entry = item["extra_info"]["entry"]
    return hashlib.sha256(json.dumps([item["extra_info"]["task"], entry["question"], entry["answer"]]).encode()).hexdigest()[:16]


def test_items_follow_verl_contract_and_carry_their_entry():
    item = TaskStream(EASY, seed=3).take(1)[0]
    assert item["raw_prompt"][0]["role"] == "system" and item["raw_prompt"][-1]["role"] == "user"
    assert item["data_source"].startswith("reasoning_gym/")
    entry = item["extra_info"]["entry"]
    assert item["reward_model"]["ground_truth"] == entry["answer"]
    assert item["raw_prompt"][-1]["content"] == entry["question"]
    assert item["dummy_tensor"].dtype == torch.uint8
    batch = collate_fn(TaskStream(EASY, seed=3).take(8))
    proto = DataProto.from_single_dict(batch)
    assert len(proto) == 8
    assert proto.non_tensor_batch["extra_info"][0]["entry"] == entry
    assert list(proto.non_tensor_batch["index"][:1]) == [item["index"]]


def test_same_position_same_item_and_weights_are_respected():
    a, b = TaskStream(EASY, seed=1).take(400), TaskStream(EASY, seed=1).take(400)
    assert [digest(x) for x in a] == [digest(x) for x in b]
    other_seed = TaskStream(EASY, seed=2).take(400)
    assert [digest(x) for x in a] != [digest(x) for x in other_seed]
    counts = {k: sum(x["extra_info"]["task"] == k for x in a) for k in ("chain_sum", "number_sorting")}
    assert 60 < counts["number_sorting"] < 2 * counts["chain_sum"]  # weight 0.5 vs 1.0


def test_every_item_is_owned_by_its_split():
    for split in SPLITS:
        for item in TaskStream(EASY, split=split, seed=0).take(300):
            assert question_owner(item["extra_info"]["entry"]["question"]) == split


@pytest.mark.slow
@pytest.mark.parametrize("mix", ["algorithmic", "intra_arithmetic", "easy"])
def test_splits_share_no_question_over_10k_items(mix):
    questions = {}
    for split in SPLITS:
        stream = TaskStream(REPO / "configs" / "mix" / f"{mix}.yaml", split=split, seed=0)
        questions[split] = {item["raw_prompt"][-1]["content"] for item in stream.take(10_000)}
        stream.close()
    assert not questions["train"] & questions["validation"]
    assert not questions["train"] & questions["evaluation"]
    assert not questions["validation"] & questions["evaluation"]


_DUMP = """
import hashlib, json
from envs.stream import TaskStream
from envs.tasks import all_tasks
stream = TaskStream({"tasks": {task: {} for task in all_tasks()}}, seed=0)
out, position = {}, 0
while len({key for key, _ in out.values()}) < len(all_tasks()):
    key, config, entry = stream.entry_at(position)
    # a few codeio programs time themselves: their answer is a duration, new at each generation whatever the seed
    shown = [entry["question"]] + ([] if "time_consumed" in str(entry["answer"]) else [entry["answer"]])
    out[position] = (key, hashlib.sha256(json.dumps(shown).encode()).hexdigest())
    position += 1
stream.close()
print("RESULT " + json.dumps(out))
"""


def results_under_hash_seeds(script: str, hash_seeds: tuple[str, ...], timeout: int) -> list:
    """The JSON after "RESULT " that `script` prints, run at once in a process for each PYTHONHASHSEED."""
    runs = [subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONHASHSEED": hash_seed},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
            for hash_seed in hash_seeds]
    results = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=timeout)
        # Reasoning Gym prints progress dots without a newline, so the marker may sit mid-line
        lines = [line.split("RESULT ", 1)[1] for line in stdout.splitlines() if "RESULT " in line]
        assert lines, f"exit {run.returncode}: {stderr[-3000:]}"
        results.append(json.loads(lines[0]))
    return results


@pytest.mark.slow
def test_every_task_is_reproducible_under_any_pythonhashseed():
    """One stream over all 105 tasks, read until every task appeared, in two processes with different PYTHONHASHSEED.

    Covers list_functions (global random) and the PYTHONHASHSEED-sensitive generators (run in producer processes).
    The answers of codeio items whose program times itself ("time_consumed_...") differ in any two runs: their
    questions are compared.
    """
    first, second = results_under_hash_seeds(_DUMP, ("1", "2"), timeout=800)
    assert len({key for key, _ in first.values()}) == len(all_tasks())
    assert [p for p in first if first[p] != second.get(p)] == []


_CODEIO = """
import hashlib, json
from envs.stream import TaskStream
stream = TaskStream({"tasks": {"codeio": {}}}, split="validation", seed=0)
print("RESULT " + json.dumps([hashlib.sha256(stream.entry_at(p)[2]["question"].encode()).hexdigest() for p in range(8)]))
stream.close()
"""


def test_codeio_items_whose_snippet_iterates_a_set_are_the_same_under_any_pythonhashseed():
    """Some of the snippets codeio runs iterate over sets: its validation item 6 at seed 0 was another program under
    PYTHONHASHSEED=3 than under 1 (the audit's counts moved with it), so codeio is generated under PYTHONHASHSEED=0."""
    first, second = results_under_hash_seeds(_CODEIO, ("1", "3"), timeout=300)
    assert first == second


def test_an_item_drawing_from_numpys_global_generator_is_one_item_per_seed():
    """codeio runs snippets that draw from np.random (here a Levy flight): seeded per candidate, the item does not
    depend on what drew from numpy before it (it decided the item's split, so the audit's counts moved between runs),
    and numpy's state is left as it was."""
    import numpy as np

    from envs.generation import config_key, generate_candidate
    from envs.splits import item_seed

    value = item_seed("validation", 0, 11, 0)
    items = []
    for prior_seed in (1, 2):
        np.random.seed(prior_seed)
        before = np.random.get_state()[1].copy()
        items.append(generate_candidate("codeio", config_key({}), value))
        assert (np.random.get_state()[1] == before).all()
    assert "np.random.normal" in items[0]["question"] and items[0] == items[1]


def test_dataloader_workers_shard_without_duplicates():
    reference = TaskStream(EASY, seed=5)
    loader = StatefulDataLoader(TaskStream(EASY, seed=5), batch_size=4, num_workers=2, collate_fn=collate_fn)
    positions = []
    for step, batch in enumerate(loader):
        positions += list(batch["index"])
        if step == 23:  # 12 batches from each worker
            break
    assert sorted(positions) == list(range(96))
    by_position = {x["index"]: digest(x) for x in reference.take(100)}
    loader2 = StatefulDataLoader(TaskStream(EASY, seed=5), batch_size=4, num_workers=2, collate_fn=collate_fn)
    batch = next(iter(loader2))
    assert [by_position[p] for p in batch["index"]] == [
        hashlib.sha256(json.dumps([e["task"], e["entry"]["question"], e["entry"]["answer"]]).encode()).hexdigest()[:16]
        for e in batch["extra_info"]]


_RESUME = """
import json, sys, torch
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.utils.dataset.rl_dataset import collate_fn
from envs.stream import TaskStream
stream = TaskStream(sys.argv[1], seed=7)
loader = StatefulDataLoader(stream, batch_size=4, num_workers=int(sys.argv[3]), collate_fn=collate_fn)
loader.load_state_dict(torch.load(sys.argv[2], weights_only=False))
out = []
for batch in loader:
    out.append([e["entry"]["question"] for e in batch["extra_info"]])
    if len(out) == 63:
        break
print(json.dumps(out))
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_restored_stream_continues_with_the_next_items_in_a_new_process(tmp_path, workers):
    loader = StatefulDataLoader(TaskStream(EASY, seed=7), batch_size=4, num_workers=workers, collate_fn=collate_fn)
    batches = []
    for batch in loader:
        batches.append([e["entry"]["question"] for e in batch["extra_info"]])
        if len(batches) == 37:
            torch.save(loader.state_dict(), tmp_path / "data.pt")
        if len(batches) == 100:
            break
    run = subprocess.run([sys.executable, "-c", _RESUME, str(EASY), str(tmp_path / "data.pt"), str(workers)],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.splitlines()[-1]) == batches[37:]


def test_prompt_length_check_with_the_real_tokenizer(tiny_tokenizer):
    stream = TaskStream(EASY, seed=0, tokenizer=tiny_tokenizer, max_prompt_length=296)  # about the median length
    items = stream.take(50)
    assert len(items) == 50 and sum(stream.stats.values()) > 10
    for item in items:
        ids = tiny_tokenizer.apply_chat_template(item["raw_prompt"], add_generation_prompt=True, return_dict=False)
        assert len(ids) <= 296
    strict = TaskStream(EASY, seed=0, tokenizer=tiny_tokenizer, max_prompt_length=20, on_long_prompt="error")
    with pytest.raises(ValueError, match=r"tokens > max_prompt_length=20: raise data.max_prompt_length"):
        strict.take(1)
    hopeless = TaskStream(EASY, seed=0, tokenizer=tiny_tokenizer, max_prompt_length=20)
    with pytest.raises(ValueError, match=r"1000 prompts in a row were skipped: too long for max_prompt_length=20"):
        hopeless.take(1)


def test_items_say_whether_their_rendered_prompt_opened_the_think_block(tiny_tokenizer):
    """The stream renders with the template's options (data.apply_chat_template_kwargs) as verl's agent loop does:
    the reward learns from `prompt_opens_think` that a response starts inside the reasoning."""
    import copy

    from utils.offline_models import THINKING_TEMPLATE

    thinking = copy.deepcopy(tiny_tokenizer)
    thinking.chat_template = THINKING_TEMPLATE.read_text()
    def first(tokenizer, **kwargs):
        return TaskStream(EASY, seed=0, tokenizer=tokenizer, max_prompt_length=4096, **kwargs).take(1)[0]
    on, off = first(thinking), first(thinking, chat_template_kwargs={"enable_thinking": False})
    assert on["extra_info"]["prompt_opens_think"] is True and off["extra_info"]["prompt_opens_think"] is False
    assert first(tiny_tokenizer)["extra_info"]["prompt_opens_think"] is False  # Qwen2.5's template opens nothing
    assert "prompt_opens_think" not in TaskStream(EASY, seed=0).take(1)[0]["extra_info"]  # no tokenizer: unknown
    # the length check renders with the same options: the empty think block makes the prompt longer
    short = TaskStream(EASY, seed=0, tokenizer=thinking, max_prompt_length=4096)
    rendered = thinking.apply_chat_template(on["raw_prompt"], add_generation_prompt=True, tokenize=False)
    limit = len(thinking.encode(rendered, add_special_tokens=False))
    assert TaskStream(EASY, seed=0, tokenizer=thinking, max_prompt_length=limit).take(1)[0]["index"] == on["index"]
    skipped = TaskStream(EASY, seed=0, tokenizer=thinking, max_prompt_length=limit,
                         chat_template_kwargs={"enable_thinking": False}).take(1)[0]
    assert skipped["index"] != on["index"] and short.take(1)[0]["index"] == on["index"]


def test_system_prompt_by_name_text_or_none():
    by_name = TaskStream(EASY, system_prompt="DeepSeekZero").take(1)[0]["raw_prompt"]
    assert "<answer>" in by_name[0]["content"]
    custom = TaskStream(EASY, system_prompt="Answer in <answer> tags.").take(1)[0]["raw_prompt"]
    assert custom[0] == {"role": "system", "content": "Answer in <answer> tags."}
    assert TaskStream(EASY, system_prompt=None).take(1)[0]["raw_prompt"][0]["role"] == "user"
    with pytest.raises(ValueError, match="unknown system prompt name 'DeepseekZero'"):
        TaskStream(EASY, system_prompt="DeepseekZero")


def test_validation_set_is_fixed_and_disjoint_from_training():
    first = build_validation_set(EASY, size=64, seed=0)
    assert [digest(x) for x in first] == [digest(x) for x in build_validation_set(EASY, size=64, seed=0)]
    train = {x["raw_prompt"][-1]["content"] for x in TaskStream(EASY, seed=0).take(2000)}
    assert not train & {x["raw_prompt"][-1]["content"] for x in first}
    assert {x["extra_info"]["split"] for x in first} == {"validation"}


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="unknown split 'val'"):
        TaskStream(EASY, split="val")
    with pytest.raises(ValueError, match="seed must be an integer"):
        TaskStream(EASY, seed=-1)
    with pytest.raises(ValueError, match="env.seed: saved 1, now 2"):
        TaskStream(EASY, seed=2).load_state_dict(TaskStream(EASY, seed=1).state_dict())
    with pytest.raises(ValueError, match="split: saved train, now validation"):
        TaskStream(EASY, split="validation").load_state_dict(TaskStream(EASY).state_dict())


MIX_A = {"tasks": {"chain_sum": {"weight": 1.0, "config": {"min_terms": 2, "max_terms": 2}},
                   "spell_backward": {"weight": 1.0}}}
MIX_B = {"tasks": {"chain_sum": {"weight": 1.0, "config": {"min_terms": 2, "max_terms": 2}},
                   "spell_backward": {"weight": 2.0}}}  # same tasks, another weight: another stream


def test_mix_fingerprint_is_stable_and_covers_what_draws_the_items(tmp_path):
    from envs.stream import mix_fingerprint

    copy = tmp_path / "renamed.yaml"
    copy.write_text(EASY.read_text())
    assert mix_fingerprint(EASY) == mix_fingerprint(copy)  # the content, not the file name
    code = f"from envs.stream import mix_fingerprint; print(mix_fingerprint({str(EASY)!r}))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env={**os.environ, "PYTHONHASHSEED": "123"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == mix_fingerprint(EASY)  # the same in another process, under another hash seed
    variants = [MIX_A, MIX_B,
                {"tasks": dict(reversed(MIX_A["tasks"].items()))},  # order: another task at each position
                {"tasks": {**MIX_A["tasks"], "chain_sum": {"config": {"min_terms": 2, "max_terms": 3}}}},
                {"tasks": {**MIX_A["tasks"], "spell_backward": {"level": 0}}},
                {**MIX_A, "curriculum": {"enabled": True}}]
    assert len({mix_fingerprint(m) for m in variants}) == len(variants)
    assert mix_fingerprint({**MIX_A, "held_out": ["number_sorting"]}) == mix_fingerprint(MIX_A)  # validation only


def test_state_of_another_mix_is_refused_and_the_same_mix_loads():
    saved = TaskStream(MIX_A, seed=4)
    saved.take(5)
    state = saved.state_dict()
    assert state["mix"] == saved.mix_fingerprint and state["version"] == 2
    with pytest.raises(ValueError) as refused:
        TaskStream(MIX_B, seed=4).load_state_dict(state)
    message = str(refused.value)
    assert "env.mix: saved <inline>" in message and "weights, configs, levels, curriculum or sampler settings changed" in message
    assert "trainer.resume_mode=disable" in message and "trainer.experiment_name" in message
    with pytest.raises(ValueError, match=r"env.mix: .*; env.seed: saved 4, now 5"):
        TaskStream(EASY, seed=5).load_state_dict(state)
    same = TaskStream(dict(MIX_A), seed=4)
    same.load_state_dict(state)
    assert [digest(x) for x in same.take(3)] == [digest(x) for x in saved.take(3)]


def test_old_state_without_a_mix_is_refused_with_the_fix():
    state = {k: v for k, v in TaskStream(EASY).state_dict().items() if not k.startswith("mix")}
    state["version"] = 1
    with pytest.raises(ValueError, match=r"version 1 != 2: .*older rg-grpo.*trainer.resume_mode=disable"):
        TaskStream(EASY).load_state_dict(state)


@pytest.mark.parametrize("workers", [0, 2])
def test_data_pt_of_another_mix_is_refused_through_the_stateful_dataloader(tmp_path, workers):
    """As verl does: torch.save(loader.state_dict()) to data.pt, then load_state_dict(torch.load(...)) into a new
    loader; torchdata hands the state to the stream when the loader is first iterated."""
    loader = StatefulDataLoader(TaskStream(MIX_A, seed=2), batch_size=2, num_workers=workers, collate_fn=collate_fn)
    batches = []
    for batch in loader:
        batches.append(list(batch["index"]))
        if len(batches) == 3:
            torch.save(loader.state_dict(), tmp_path / "data.pt")
        if len(batches) == 4:
            break
    other = StatefulDataLoader(TaskStream(MIX_B, seed=2), batch_size=2, num_workers=workers, collate_fn=collate_fn)
    other.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    with pytest.raises(ValueError, match="stream state \\(data.pt\\) was saved for another stream; env.mix"):
        next(iter(other))
    same = StatefulDataLoader(TaskStream(MIX_A, seed=2), batch_size=2, num_workers=workers, collate_fn=collate_fn)
    same.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    assert list(next(iter(same))["index"]) == batches[3]


def test_state_carries_the_sampler_and_a_learnability_state_is_refused_by_a_uniform_mix():
    learn = {**MIX_A, "sampler": {"strategy": "learnability"}}
    saved = TaskStream(learn, seed=4)
    saved.take(3)
    saved.sampler.update({"chain_sum": [[1.0, 0.0]] * 4})
    state = saved.state_dict()
    assert state["version"] == 2 and state["sampler"]["windows"]["chain_sum"] and state["sampler"]["updates"] == 1
    with pytest.raises(ValueError, match="env.mix: saved <inline>.*curriculum or sampler settings changed"):
        TaskStream(MIX_A, seed=4).load_state_dict(state)
    same = TaskStream(learn, seed=4)
    same.load_state_dict(state)
    assert same.sampler.weights() == saved.sampler.weights()
    assert [digest(x) for x in same.take(3)] == [digest(x) for x in saved.take(3)]
