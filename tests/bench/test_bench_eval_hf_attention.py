"""bench/bench_eval_hf_attention.py: both attentions decode the suite's first items, same completions, a record."""

import json

from bench.bench_eval_hf_attention import main


def test_both_arms_decode_the_same_completions_and_the_record_says_so(tiny_model_dir, tmp_path):
    out = tmp_path / "result.json"
    result = main(["--model", str(tiny_model_dir), "--limit", "6", "--repeats", "1", "--out", str(out)])
    assert result["items"] == 6 and result["same_completions"] is True
    assert set(result["best"]) == {"sdpa", "rg_sdpa_gqa"} and result["speedup"] > 0
    assert json.loads(out.read_text())["same_completions"] is True
