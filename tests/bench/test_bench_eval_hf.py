"""bench/bench_eval_hf.py: each comparison's arms decode the suite's first items, same completions, a record."""

import json

import pytest

from bench.bench_eval_hf import main


@pytest.mark.parametrize("compare, arms", [("attention", {"sdpa", "rg_sdpa_gqa"}),
                                           ("greedy", {"generate", "drop_stopped_rows"}),
                                           ("prompts", {"every_item", "distinct_prompts"})])
def test_both_arms_decode_the_same_completions_and_the_record_says_so(tiny_model_dir, tmp_path, compare, arms):
    out = tmp_path / "result.json"
    result = main(["--compare", compare, "--model", str(tiny_model_dir), "--limit", "6", "--repeats", "1",
                   "--out", str(out)])
    assert result["items"] == 6 and result["same_completions"] is True and result["compare"] == compare
    assert set(result["best"]) == arms and result["speedup"] > 0
    assert json.loads(out.read_text())["same_completions"] is True
