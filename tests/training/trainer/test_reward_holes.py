"""A hole in the reward shows on the run: a scorer that gives a constant answer full marks, through verl's reward
function (envs/verl_reward.py), the trainer's records and metrics (training/trainer/metrics.py), the progress file
(training/trainer/progress.py) and the driver's step line (training/launch/console.py). No model: the responses are
written here, as a policy that found the hole would write them."""

import asyncio
import io
import json
import logging

import pytest

from envs import scorers
from envs.generation import generate_entry
from envs.mix import load_mix
from training.launch.console import ProgressPrinter
from training.trainer.metrics import record_from_reward, reward_holes
from training.trainer.progress import PROGRESS_FILE, ProgressTracking, hold_for_step
from tests.conftest import MIXES

HOLE = "7"


def holed_chain_sum(answer: str, entry: dict) -> float:
    """chain_sum's scorer with a hole: the gold, and "7" whatever the sum."""
    return 1.0 if answer.strip() in (HOLE, str(entry["answer"])) else 0.0


@pytest.fixture
def holed_scorer(monkeypatch):
    monkeypatch.setitem(scorers.REPAIRED_SCORERS, "chain_sum", holed_chain_sum)
    scorers.scorer_for.cache_clear()  # scorers are cached per task and config
    yield
    monkeypatch.undo()
    scorers.scorer_for.cache_clear()


def scored_step(items: int = 8, samples: int = 4) -> list:
    """The quickstart's tasks, one step of `items` prompts a task x `samples` responses, scored by verl's reward
    function as the trainer reads them back: chain_sum's policy answers "7" three times in four, basic_arithmetic's
    answers right."""
    from envs.verl_reward import compute_score

    mix = load_mix(MIXES / "quickstart.yaml")
    kwargs = {"answer_fallback": "last_number", "partial_credit": True, "isolate": False}  # in-process: the patch holds
    calls, tasks = [], []
    for spec in mix.tasks:
        entries = [generate_entry(spec.task, spec.config, "train", 0, position) for position in range(40)]
        entries = [entry for entry in entries if str(entry["answer"]) != HOLE][:items]
        for item, entry in enumerate(entries):
            extra = {"entry": entry, "task": spec.key, "task_name": spec.task, "config": spec.config}
            for sample in range(samples):
                holed = spec.key == "chain_sum" and sample < samples - 1
                text = f"the answer is {HOLE if holed else entry['answer']}"
                calls.append(compute_score(f"reasoning_gym/{spec.task}", text, entry["answer"], extra, **kwargs))
                tasks.append((spec.key, f"{spec.key}-{item}"))

    async def score_all():
        return await asyncio.gather(*calls)

    results = asyncio.run(score_all())
    return [record_from_reward(task, group, result, result["score"], 10.0) for (task, group), result in
            zip(tasks, results)]


def test_a_constant_answer_with_full_marks_shows_in_the_metrics_and_on_the_step_line(holed_scorer, tmp_path, caplog):
    records = scored_step()
    assert all(r.accuracy == 1.0 for r in records)  # every response has full marks: accuracy alone says all is well
    metrics, warnings = reward_holes(records)
    assert metrics["env/chain_sum/full_marks_not_gold"] == pytest.approx(0.75)  # 24 of 32
    assert metrics["env/chain_sum/answer_collapse"] == 1.0  # "7" on all 8 items
    assert metrics["env/basic_arithmetic/full_marks_not_gold"] == 0.0
    assert metrics["env/basic_arithmetic/answer_collapse"] <= 0.25  # the golds: items that share one count once
    assert warnings == ['reward hole? chain_sum: 24 of 32 full marks are not the gold (most often "7", 24x)',
                        'reward hole? chain_sum: one answer, "7", has full marks on 8 of 8 items whose golds differ']

    class Tracking:  # verl's Tracking's interface
        def log(self, data, step, backend=None):
            pass

    tracking = ProgressTracking(Tracking(), tmp_path, total_steps=2)
    hold_for_step(tracking, reward_holes=warnings)  # what the trainer's apply_feedback does
    with caplog.at_level(logging.WARNING, logger="training.trainer.progress"):
        tracking.log(data={"timing_s/step": 2.0, "env/reward": 1.0, "env/accuracy": 1.0, **metrics}, step=1)
    hold_for_step(tracking, reward_holes=reward_holes(records[32:])[1])  # step 2: basic_arithmetic only, no warning
    tracking.log(data={"timing_s/step": 2.0, "env/reward": 1.0, "env/accuracy": 1.0}, step=2)
    events = [json.loads(line) for line in (tmp_path / PROGRESS_FILE).read_text().splitlines()]
    assert events[0]["reward_holes"] == warnings and "reward_holes" not in events[1]
    assert [r.getMessage() for r in caplog.records] == [f"step 1: {warning}" for warning in warnings]  # worker's log

    stream = io.StringIO()
    printer = ProgressPrinter(tmp_path / PROGRESS_FILE, stream, started=0.0)
    printer.read_from(0)
    printer.bar.close()
    first, second = stream.getvalue().splitlines()
    assert first.startswith("[step 1/2] reward 1.000  accuracy 1.000")
    assert first.endswith("  " + "  ".join(warnings)) and "reward hole?" not in second


def test_the_same_responses_under_the_real_scorer_do_not_warn():
    """chain_sum's own scorer gives "7" nothing: the full marks left are the golds', and nothing warns."""
    scorers.scorer_for.cache_clear()
    records = scored_step()
    full = [r for r in records if r.accuracy == 1.0]
    assert len(full) == 8 + 32 and {r.pred_is_gold for r in full} == {1.0}
    metrics, warnings = reward_holes(records)
    assert metrics["env/chain_sum/full_marks_not_gold"] == 0.0 == metrics["env/basic_arithmetic/full_marks_not_gold"]
    assert metrics["env/chain_sum/answer_collapse"] <= 0.25 and warnings == []
