"""pass@k, bootstrap CIs and aggregation over generation records."""

import itertools
import math

import pytest

from evaluation.metrics import (
    aggregate,
    bootstrap_ci,
    common_answer_share,
    pass_at_k,
    repeated_answer_share,
    summarize,
)


@pytest.mark.parametrize("n, c, k", [(3, 0, 1), (3, 1, 1), (3, 1, 2), (5, 2, 3), (4, 4, 2), (6, 1, 6)])
def test_pass_at_k_matches_enumeration(n, c, k):
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(outcomes, k))
    assert pass_at_k(n, c, k) == pytest.approx(sum(any(s) for s in subsets) / len(subsets))


def test_pass_at_k_needs_k_samples():
    with pytest.raises(ValueError, match="pass@4 needs at least 4"):
        pass_at_k(3, 1, 4)


def test_bootstrap_ci_brackets_the_mean():
    values = [0.0] * 50 + [1.0] * 50
    lo, hi = bootstrap_ci(values, resamples=500)
    assert lo < 0.5 < hi and hi - lo < 0.3
    assert bootstrap_ci([1.0, 1.0]) == (1.0, 1.0)
    assert all(math.isnan(v) for v in bootstrap_ci([]))


def rec(item, sample, acc, group="g", task="t", score=None, found=True, tokens=10):
    return {"item_id": f"{group}/{task}/{item}", "sample": sample, "group": group, "task_key": task, "task": task,
            "accuracy": acc, "score": acc if score is None else score, "answer_found": found, "num_tokens": tokens,
            "finish_reason": "stop"}


def test_summarize_binarised_accuracy_raw_score_and_rates():
    records = [rec(0, 0, 1.0), rec(0, 1, 0.0, score=0.5), rec(1, 0, 0.0, found=False, tokens=30), rec(1, 1, 0.0)]
    st = summarize(records, [1, 2], resamples=100)
    assert st["n_items"] == 2 and st["n_samples"] == 4
    assert st["accuracy"] == 0.25 and st["mean_score"] == pytest.approx(1.5 / 4)
    assert st["pass@1"] == 0.25 and st["pass@2"] == 0.5
    assert st["answer_found"] == 0.75 and st["mean_response_tokens"] == 15


def test_aggregate_groups_tasks_and_overall():
    records = [rec(i, s, float(i == 0), group="cat", task="a") for i in range(2) for s in range(2)]
    records += [rec(i, 0, 1.0, group="mix", task="b") for i in range(2)]
    out = aggregate(records, [1], {"cat": "category", "mix": "composite"}, resamples=50)
    assert set(out["tasks"]) == {"cat/a", "mix/b"}
    assert out["groups"]["cat"]["accuracy"] == 0.5 and out["groups"]["mix"]["kind"] == "composite"
    assert out["overall"]["accuracy"] == pytest.approx(4 / 6)


def test_common_answer_share_is_a_constant_guess_per_task():
    """Letter counts answer "1" on 124 of 150 items: a model that always says 1 scores 0.83 there (2026-11-26)."""
    records = [{**rec(i, s, 0.0, task="letters"), "answer": "1" if i < 3 else str(i)}
               for i in range(4) for s in range(2)]
    records += [{**rec(i, 0, 0.0, task="sums"), "answer": str(i)} for i in range(4)]  # every answer differs
    assert common_answer_share(records[:8]) == 0.75  # samples of one item count once
    assert common_answer_share(records) == pytest.approx((3 + 1) / 8)  # each task guesses its own answer
    assert summarize(records[:8], [1], resamples=10)["common_answer"] == 0.75
    assert math.isnan(common_answer_share([rec(0, 0, 1.0)]))  # no gold answers recorded


def test_repeated_answer_share_counts_responses_giving_the_tasks_most_frequent_answer():
    records = [{**rec(i, 0, 0.0, task="letters"), "pred": "1" if i < 3 else None} for i in range(4)]
    records += [{**rec(i, 0, 0.0, task="sums"), "pred": str(i % 2)} for i in range(4)]
    assert repeated_answer_share(records[:4]) == 0.75  # no answer never counts as the repeated one
    assert repeated_answer_share(records) == pytest.approx((3 + 2) / 8)
    assert summarize(records[:4], [1], resamples=10)["repeated_answer"] == 0.75
    assert math.isnan(repeated_answer_share([]))
