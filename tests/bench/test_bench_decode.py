"""bench/bench_decode.py: the rows both arms sample are the quickstart stream's prompts, in GRPO groups."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_rows_are_the_train_streams_first_prompts_each_repeated_as_a_group():
    from transformers import AutoTokenizer

    spec = importlib.util.spec_from_file_location("bench_decode", REPO / "bench" / "bench_decode.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cfg = bench.quickstart_config("tiny")
    tokenizer = AutoTokenizer.from_pretrained(str(cfg.actor_rollout_ref.model.path))
    rows = bench.group_prompts(cfg, 2, 3, tokenizer)
    assert len(rows) == 6 and rows[0] == rows[1] == rows[2] != rows[3] == rows[4] == rows[5]
    first = tokenizer.decode(rows[0])
    assert cfg.env.system_prompt in first  # the config's system prompt, through the chat template
