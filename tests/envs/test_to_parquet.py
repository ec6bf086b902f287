"""The stream to parquet: the file holds the stream's items, verl's RLHFDataset reads it and our reward scores it through
verl's reward manager, two writes are byte-identical, and TRL's layout (datasets) works with our TRL reward wrapper."""

import asyncio
import inspect
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf

from envs.audit import gold_answer
from envs.entry_json import decode_entry, encode_entry, same_value
from envs.generation import generate_entry
from envs.reward import score_response
from envs.stream import TaskStream
from envs.tasks import all_tasks
from envs.to_parquet import SCHEMA, read_metadata, write_parquet

REPO = Path(__file__).resolve().parents[2]
# Tasks whose metadata JSON alone would change: tuples the scorer compares (rearc), integer keys and an answer of None
# (graph_color), nested tuples (knights_knaves), and one task that depends on PYTHONHASHSEED (isomorphic_strings).
MIX = {"tasks": {
    "chain_sum": {"weight": 1.0, "config": {"min_terms": 2, "max_terms": 3}},
    "rearc": {"weight": 1.0},
    "graph_color": {"weight": 1.0},
    "knights_knaves": {"weight": 1.0},
    "isomorphic_strings": {"weight": 1.0},
    "number_sorting": {"weight": 1.0},
}}
WRONG = "<think>no idea</think><answer>definitely not it</answer>"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("parquet") / "mix.parquet"
    write_parquet(MIX, "train", 3, 48, path, progress=False)
    return path


@pytest.fixture(autouse=True)
def datasets_cache(tmp_path, monkeypatch):
    """`datasets` caches what it loads: keep it in the test's folder."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")


def test_rows_are_the_stream_items(written):
    table = pq.read_table(written)
    assert table.schema.remove_metadata() == SCHEMA and table.num_rows == 48
    stream = TaskStream(MIX, split="train", seed=3)
    try:
        items = stream.take(48)
    finally:
        stream.close()
    for row, item in zip(table.to_pylist(), items):
        info, extra = item["extra_info"], row["extra_info"]
        assert row["prompt"] == item["raw_prompt"] and row["data_source"] == item["data_source"]
        assert row["reward_model"] == {"style": "rule", "ground_truth": item["reward_model"]["ground_truth"]}
        assert same_value(info["entry"], decode_entry(extra["entry_json"]))
        assert {k: extra[k] for k in ("task", "task_name", "config_text", "level", "split", "seed", "position", "index")} \
            == {k: info[k] for k in ("task", "task_name", "config_text", "level", "split", "seed", "position", "index")}
    assert {r["extra_info"]["task"] for r in table.to_pylist()} == set(MIX["tasks"])
    meta = read_metadata(written)
    assert (meta["split"], meta["seed"], meta["size"], meta["mix_tasks"]) == ("train", 3, 48, list(MIX["tasks"]))


def test_entry_json_is_exact_for_every_task_and_scores_the_same():
    """Every Reasoning Gym task: the decoded entry equals the original (types, key order), and a correct and a wrong
    answer score the same against both. Plain JSON would not do (rearc and arc_agi compare tuples: 1 -> 0)."""
    failures = []
    for task in all_tasks():
        entry = generate_entry(task, {}, "train", 0, 0)
        decoded = decode_entry(encode_entry(entry))
        if not same_value(entry, decoded) or encode_entry(decoded) != encode_entry(entry):
            failures.append((task, "round trip"))
        for text in (f"<answer>{gold_answer(entry) if task not in ('boxnet', 'rush_hour') else ''}</answer>", WRONG):
            if score_response(text, entry, task=task)["score"] != score_response(text, decoded, task=task)["score"]:
                failures.append((task, text[:40]))
    assert failures == []
    rearc = generate_entry("rearc", {}, "train", 0, 0)
    text = f"<answer>{rearc['answer']}</answer>"
    assert score_response(text, json.loads(json.dumps(rearc)), task="rearc")["score"] == 0.0  # why not plain JSON
    assert score_response(text, decode_entry(encode_entry(rearc)), task="rearc")["score"] == 1.0


def test_entry_json_tags():
    odd = {1: (1, (2, 3)), "a": {"__tuple__": 3}, "s": {3, 1}, "fs": frozenset({"x"}), "f": float("nan"),
           "i": float("-inf"), "n": np.int64(3), "t": np.str_("x"), (1, 2): None, "l": [None, True, 1.5]}
    decoded = decode_entry(encode_entry(odd))
    assert same_value(odd, decoded) and type(decoded["n"]) is int and type(decoded["t"]) is str
    assert not same_value((1, 2), [1, 2]) and not same_value({1: 0}, {"1": 0}) and not same_value(True, 1)
    with pytest.raises(TypeError, match=r"at \.b\[0\] has type bytes"):
        encode_entry({"b": [b"x"]})


def _verl_dataset(path, tokenizer, tmp_path, **overrides):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 8192, "filter_overlong_prompts": True,
                               "filter_overlong_prompts_workers": 1, "truncation": "error",
                               "cache_dir": str(tmp_path / "verl_cache"), **overrides})
    return RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=config)


def test_verls_rlhfdataset_reads_it_and_our_reward_scores_it(written, tiny_tokenizer, tmp_path):
    """verl's own loader, collate_fn and reward manager (the custom reward function path verl uses in training)."""
    from hydra import compose, initialize_config_module
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.dataset.rl_dataset import collate_fn

    dataset = _verl_dataset(written, tiny_tokenizer, tmp_path)
    assert len(dataset) == 48
    items = [dataset[i] for i in range(len(dataset))]
    assert items[5]["raw_prompt"][0]["role"] == "system" and items[5]["index"] == 5
    batch = collate_fn(items)  # what verl's dataloader hands the trainer: non-tensor columns as object arrays
    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            f"reward.custom_reward_function.path={REPO / 'envs' / 'verl_reward.py'}",
            "reward.custom_reward_function.name=compute_score"])
    manager = load_reward_manager(config, tiny_tokenizer)

    def one(i, text):
        ids = tiny_tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        prompt = torch.tensor([[1, 2, 3]])
        return DataProto.from_single_dict({
            "prompts": prompt, "responses": ids, "attention_mask": torch.ones((1, 3 + ids.shape[1]), dtype=torch.long),
            **{k: np.array([batch[k][i]], dtype=object) for k in ("data_source", "reward_model", "extra_info")}})

    cases = []
    for i, item in enumerate(items):
        entry = decode_entry(item["extra_info"]["entry_json"])
        cases += [(i, f"<think>x</think><answer>{gold_answer(entry)}</answer>", 1.0), (i, WRONG, 0.0)]

    async def run_all():
        return await asyncio.gather(*[manager.run_single(one(i, text)) for i, text, _ in cases])

    results = manager.loop.run_until_complete(run_all())
    wrong = [(items[i]["extra_info"]["task"], expected, r["reward_score"], r["reward_extra_info"]["reason"])
             for (i, _, expected), r in zip(cases, results) if r["reward_score"] != expected]
    assert wrong == []
    assert {r["reward_extra_info"]["task"] for r in results} == set(MIX["tasks"])

    # compute_score called directly the way verl's reward managers call it (keywords, ground_truth from reward_model)
    from envs.verl_reward import compute_score

    item = items[0]
    entry = decode_entry(item["extra_info"]["entry_json"])
    result = asyncio.run(compute_score(data_source=item["data_source"], solution_str=f"<answer>{gold_answer(entry)}</answer>",
                                       ground_truth=item["reward_model"]["ground_truth"], extra_info=item["extra_info"]))
    assert result["score"] == 1.0 and "entry" not in item["extra_info"]  # the caller's dict is left as it was


def test_long_prompts_are_filtered_by_verl_not_by_the_export(written, tiny_tokenizer, tmp_path):
    lengths = [len(tiny_tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True,
                                                      return_dict=False)) for r in pq.read_table(written).to_pylist()]
    limit = sorted(lengths)[len(lengths) // 2]
    assert len(_verl_dataset(written, tiny_tokenizer, tmp_path, max_prompt_length=limit)) == sum(n <= limit for n in lengths)


def _cli(tmp_path, name, *args, hash_seed="random"):
    output = tmp_path / name
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    done = subprocess.run([sys.executable, "-m", "envs.to_parquet", "--mix", "easy", "--split", "validation",
                           "--size", "40", "-o", str(output), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return output, done


def test_same_arguments_give_the_same_bytes(tmp_path):
    """Two writes of a mix with a PYTHONHASHSEED-sensitive task, under different hash seeds: the same file."""
    first = tmp_path / "a" / "x.parquet"
    write_parquet(MIX, "validation", 1, 30, first, progress=False)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    code = ("import json, sys; from envs.to_parquet import write_parquet; "
            "write_parquet(json.loads(sys.argv[1]), 'validation', 1, 30, sys.argv[2], progress=False)")
    subprocess.run([sys.executable, "-c", code, json.dumps(MIX), str(tmp_path / "b" / "x.parquet")], cwd=REPO, env=env,
                   check=True, timeout=300)
    assert first.read_bytes() == (tmp_path / "b" / "x.parquet").read_bytes()
    write_parquet(MIX, "validation", 2, 30, tmp_path / "c.parquet", progress=False)
    assert (tmp_path / "c.parquet").read_bytes() != first.read_bytes()


def test_command_line(tmp_path):
    """Mix by name (configs/mix), a progress bar on stderr, the system prompt by name or none, no temporary left."""
    output, done = _cli(tmp_path, "out/easy.parquet", "--seed", "4")
    assert "40/40" in done.stderr and "wrote 40 items" in done.stdout
    again, _ = _cli(tmp_path, "again.parquet", "--seed", "4", "--no-progress", hash_seed="0")
    assert output.read_bytes() == again.read_bytes()
    assert sorted(p.name for p in output.parent.iterdir()) == ["easy.parquet"]
    rows = pq.read_table(output).to_pylist()
    assert rows[0]["prompt"][0]["role"] == "system" and rows[0]["extra_info"]["split"] == "validation"
    bare, _ = _cli(tmp_path, "bare.parquet", "--system-prompt", "", "--no-progress")
    assert [m["role"] for m in pq.read_table(bare).to_pylist()[0]["prompt"]] == ["user"]
    path_mix, _ = _cli(tmp_path, "path.parquet", "--no-progress", "--mix", str(REPO / "configs" / "mix" / "easy.yaml"))
    assert pq.read_table(path_mix).num_rows == 40


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    import envs.to_parquet as to_parquet

    path = tmp_path / "out" / "keep.parquet"
    write_parquet(MIX, "train", 0, 5, path, progress=False)
    before = path.read_bytes()
    calls = []

    def failing(item):
        calls.append(1)
        if len(calls) > 1500:
            raise KeyboardInterrupt
        return real(item)

    real = to_parquet.to_row
    monkeypatch.setattr(to_parquet, "to_row", failing)
    with pytest.raises(KeyboardInterrupt):
        write_parquet({"tasks": {"chain_sum": {"weight": 1.0}}}, "train", 0, 3000, path, progress=False)
    assert path.read_bytes() == before and [p.name for p in path.parent.iterdir()] == ["keep.parquet"]
    with pytest.raises(ValueError, match="size must be >= 1"):
        write_parquet(MIX, "train", 0, 0, path, progress=False)


def test_trl_layout_and_reward_wrapper(written):
    """`datasets` reads the file as TRL's GRPOTrainer takes it: a conversational `prompt` column, and the other columns
    reach reward functions as keyword arguments (one value per completion). No training, no trl needed."""
    from datasets import load_dataset

    from envs.trl_reward import reasoning_gym_reward

    dataset = load_dataset("parquet", data_files=str(written))["train"]
    assert dataset.column_names == ["prompt", "data_source", "reward_model", "extra_info"]
    assert set(dataset[0]["prompt"][-1]) == {"role", "content"} and dataset[0]["prompt"][-1]["role"] == "user"
    inputs = [dataset[i] for i in range(len(dataset)) for _ in range(2)]  # 2 generations per prompt, as TRL repeats
    texts = []
    for example in inputs[::2]:
        answer = gold_answer(decode_entry(example["extra_info"]["entry_json"]))
        texts += [f"<think>x</think><answer>{answer}</answer>", WRONG]
    kwargs = {key: [example[key] for example in inputs] for key in inputs[0] if key != "prompt"}  # TRL's own rule
    kwargs.update(trainer_state=None, log_extra=lambda *a: None, log_metric=lambda *a: None)
    prompts = [example["prompt"] for example in inputs]
    chat = [[{"role": "assistant", "content": t}] for t in texts]
    expected = [1.0, 0.0] * len(dataset)
    assert asyncio.run(reasoning_gym_reward(prompts=prompts, completions=chat, completion_ids=None, **kwargs)) == expected
    assert asyncio.run(reasoning_gym_reward(prompts=prompts, completions=texts, completion_ids=None, **kwargs)) == expected


def test_trl_reward_options_reach_the_score(written):
    """make_trl_reward binds reward options: an untagged correct sum scores 1 with answer_fallback only."""
    from datasets import load_dataset

    from envs.trl_reward import make_trl_reward, reasoning_gym_reward

    dataset = load_dataset("parquet", data_files=str(written))["train"]
    entries = [decode_entry(r["extra_info"]["entry_json"]) for r in dataset]
    sums = [(r, e) for r, e in zip(dataset, entries) if e["metadata"]["source_dataset"] == "chain_sum"]
    assert sums
    rows = [r for r, _ in sums]
    texts = [f"So the result is {e['answer']}." for _, e in sums]
    kwargs = {key: [r[key] for r in rows] for key in ("data_source", "reward_model", "extra_info")}
    prompts = [r["prompt"] for r in rows]
    fallback = make_trl_reward(answer_fallback="last_number")
    assert fallback.__name__ == "reasoning_gym_reward"  # TRL's metric names come from it
    assert asyncio.run(fallback(prompts=prompts, completions=texts, **kwargs)) == [1.0] * len(rows)
    assert asyncio.run(reasoning_gym_reward(prompts=prompts, completions=texts, **kwargs)) == [0.0] * len(rows)
    with pytest.raises(ValueError, match="answer_fallback"):
        asyncio.run(make_trl_reward(answer_fallback="first_word")(prompts=prompts, completions=texts, **kwargs))


def test_the_docs_show_the_tested_wrapper():
    from envs.trl_reward import make_trl_reward

    assert inspect.getsource(make_trl_reward) in (REPO / "docs" / "task-stream.md").read_text()


def test_trls_own_reward_call(written):
    """With trl importable: GRPOTrainer._calculate_rewards itself (on a stand-in trainer) calls our wrapper."""
    trl_grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    from datasets import load_dataset

    from envs.trl_reward import reasoning_gym_reward

    dataset = load_dataset("parquet", data_files=str(written))["train"]
    inputs = [dataset[i] for i in range(6)]
    texts = [f"<answer>{gold_answer(decode_entry(x['extra_info']['entry_json']))}</answer>" if i % 2 == 0 else WRONG
             for i, x in enumerate(inputs)]
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device=torch.device("cpu"), is_main_process=True),
        reward_funcs=[reasoning_gym_reward], reward_processing_classes=[None],
        reward_func_names=["reasoning_gym_reward"], state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(report_to=[]), _log_completion_extra=lambda *a, **k: None,
        _log_metric=lambda *a, **k: None, environments=None, async_loop=loop)
    try:
        rewards = trl_grpo.GRPOTrainer._calculate_rewards(
            trainer, inputs, [x["prompt"] for x in inputs], [[{"role": "assistant", "content": t}] for t in texts],
            [[0]] * len(inputs))
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
    assert rewards[:, 0].tolist() == [1.0, 0.0] * 3
