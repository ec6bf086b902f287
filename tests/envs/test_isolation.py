"""Isolated scoring: hangs are stopped after the timeout, nothing else in the batch is lost, and it stays cheap."""

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from reasoning_gym.factory import DATASETS

from envs.isolation import IsolatedScorer
from envs.reward import RewardOptions

PLUGIN = Path(__file__).resolve().parents[1] / "hanging_tasks.py"


@pytest.fixture(scope="module")
def scorer():
    """A scorer whose child process knows the misbehaving test tasks (registered via RG_GRPO_TASK_MODULES)."""
    os.environ["RG_GRPO_TASK_MODULES"] = str(PLUGIN)
    before = set(DATASETS)
    spec = importlib.util.spec_from_file_location("hanging_tasks", PLUGIN)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # and in this process, for generating entries
    scorer = IsolatedScorer()
    yield scorer
    scorer.close()
    del os.environ["RG_GRPO_TASK_MODULES"]
    for name in set(DATASETS) - before:  # every task the plugin added: other test modules count Reasoning Gym's own
        DATASETS.pop(name, None)


def entry(task, idx):
    return {"question": f"Say {idx}.", "answer": str(idx), "metadata": {"source_dataset": task, "source_index": idx}}


@pytest.mark.parametrize("task, poison", [("test_sleepy_scorer", "sleep"), ("test_deaf_scorer", "deaf")])
def test_a_hanging_scorer_costs_one_score_and_nothing_else(scorer, task, poison):
    options = RewardOptions(timeout_s=1.0)
    requests = [{"response": f"<answer>{i}</answer>", "entry": entry(task, i), "options": options} for i in range(20)]
    requests[7] = {**requests[7], "response": f"<answer>{poison}</answer>"}
    start = time.monotonic()
    results = scorer.score_many(requests)
    elapsed = time.monotonic() - start
    assert [r["score"] for r in results] == [1.0] * 7 + [0.0] + [1.0] * 12
    assert "timed out" in results[7]["reason"] or "hung" in results[7]["reason"]
    assert all("response_chars" in r and "response_length" not in r for r in results)  # verl needs uniform keys
    assert elapsed < 60  # two kills and restarts at most, not the 3600 s the scorer would take
    # and the scorer still works afterwards
    assert scorer.score_many(requests[:2])[1]["score"] == 1.0


def test_bad_responses_never_crash(scorer):
    e = entry("test_sleepy_scorer", 3)
    bad = [None, 42, "", "\ud800<answer>3</answer>", "<answer>" * 10_000, "x" * 300_000]
    results = scorer.score_many([{"response": r, "entry": e} for r in bad])
    assert [r["score"] for r in results] == [0.0] * len(bad)
    assert all(r["reason"] for r in results[:4]) and "exceeds max_response_chars" in results[5]["reason"]
    broken = scorer.score_many([{"response": "<answer>3</answer>", "entry": {"question": "?"}},
                                {"response": "<answer>3</answer>", "entry": e}])
    assert broken[0]["score"] == 0.0 and "could not score" in broken[0]["reason"] and broken[1]["score"] == 1.0


def test_compute_score_is_verls_async_entry_point():
    from envs.generation import generate_entry
    from envs.verl_reward import compute_score

    item = generate_entry("chain_sum", {}, "train", 0, 0)
    extra = {"entry": item, "task": "sums", "task_name": "chain_sum", "config": {}}

    async def run():
        return await asyncio.gather(*[compute_score("reasoning_gym/chain_sum", text, item["answer"], extra)
                                      for text in (f"<answer>{item['answer']}</answer>", "\ud800", "no")])

    good, surrogate, missing = asyncio.run(run())
    assert good["score"] == 1.0 and good["task"] == "sums"
    assert surrogate["score"] == 0.0 and "invalid Unicode" in surrogate["reason"]
    assert missing["answer_found"] == 0.0
    with pytest.raises(ValueError, match="has no 'entry'"):
        asyncio.run(compute_score("reasoning_gym/chain_sum", "x", "1", {}))


def chain_sum_requests(n, **extra):
    from envs.generation import generate_entry

    items = [generate_entry("chain_sum", {}, "train", 0, i) for i in range(n)]
    return [{"response": f"<answer>{e['answer']}</answer>", "entry": e, **extra} for e in items]


def wait_ready(scorer, count, timeout=120.0):
    deadline = time.monotonic() + timeout
    while scorer.ready_children() < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return scorer.ready_children()


def test_warm_up_starts_the_children_before_the_first_request():
    scorer = IsolatedScorer(processes=2)
    try:
        assert scorer.ready_children() == 0 and scorer.starts == 0  # nothing starts before it is asked to
        scorer.warm_up()
        scorer.warm_up()  # idempotent
        assert wait_ready(scorer, 2) == 2 and scorer.starts == 2
        scorer.warm_up()
        results = scorer.score_many(chain_sum_requests(8))
        assert [r["score"] for r in results] == [1.0] * 8
        assert scorer.starts == 2  # the first request used the warmed children: it started none
    finally:
        scorer.close()


def test_a_request_during_warm_up_waits_for_those_children():
    scorer = IsolatedScorer(processes=2)
    try:
        scorer.warm_up()
        results = scorer.score_many(chain_sum_requests(8))  # most likely before the children are ready
        scorer.warm_up()
        assert [r["score"] for r in results] == [1.0] * 8 and scorer.starts == 2 and scorer.ready_children() == 2
    finally:
        scorer.close()


def test_importing_verls_reward_module_warms_the_shared_scorer(repo):
    code = ("import time, envs.verl_reward; from envs.isolation import shared_scorer; s = shared_scorer(); "
            "deadline = time.monotonic() + 120\n"
            "while s.ready_children() < 2 and time.monotonic() < deadline: time.sleep(0.02)\n"
            "print(s.ready_children(), s.starts)")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=180)
    assert out.stdout.split() == ["2", "2"], out.stderr[-2000:]  # ready without any score request


def test_the_length_key_crosses_the_pipe(scorer):
    e = entry("test_sleepy_scorer", 3)
    results = scorer.score_many([
        {"response": "<answer>3</answer>", "entry": e, "response_length": 5},
        {"response": "<answer>3</answer>", "entry": e},
        {"response": "<answer>3</answer>", "entry": {"question": "?"}, "response_length": 4},  # fails in the child
        {"response": "<answer>3</answer>", "entry": {"question": "?"}}])
    assert [r.get("response_length") for r in results] == [5, None, 4, None]
    assert [r.get("response_chars") for r in results] == [None, 18, None, 18]
    assert results[0]["score"] == 1.0 and "could not score" in results[2]["reason"]
