"""gpu_kit/actor_bench.py on the CPU: the packing, the varlen path's sequence bounds and the agreement check that
would catch a path attending across sequences (issue 46's stage `a_actor_bench`, rehearsed at toy sizes)."""

import json
import sys

import pytest
import torch

from gpu_kit import actor_bench, actor_paths
from gpu_kit.actor_bench import Bench, Shape, packed_micro_batches, padded_micro_batches
from gpu_kit.actor_paths import cu_seqlens_from_positions

DRY = Shape("qwen2.5-0.5b", 3, 2, 20, 6, 6, 64, False)  # GQA (14 query heads, 2 key/value heads) at toy width


def test_micro_batches_keep_every_sequence_in_order_within_the_budget():
    lengths = [10, 12, 7, 30, 5, 5]
    packed = packed_micro_batches(lengths, 25)
    assert packed == [[0, 1], [2], [3], [4, 5]]  # 30 > 25 goes alone
    assert [i for b in packed for i in b] == list(range(6))
    assert padded_micro_batches(lengths, 4) == [[0, 1, 2, 3], [4, 5]]


def test_sequence_bounds_come_from_the_position_ids_of_a_packed_row():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    bounds, longest = cu_seqlens_from_positions(positions, torch)
    assert bounds.tolist() == [0, 3, 5, 9] and bounds.dtype == torch.int32 and longest == 4


def test_the_packed_paths_agree_with_the_padded_one_and_a_leak_across_sequences_is_caught(monkeypatch):
    """sdpa_packed (transformers' own mask) and varlen_packed (our bounds; a per-sequence sdpa loop on a CPU) give
    the padded path's hidden states and log-probs; bounds that let a row's sequences see each other do not."""
    bench = Bench(DRY, "cpu", dry_run=True, steps=1)
    padded = bench.attention_path("sdpa_padded")
    assert padded["status"] == "ok" and padded["tokens"] == sum(bench.lengths)
    assert padded["tokens_with_padding"] > padded["tokens"]  # prompts differ: padding is attended
    for path in ("sdpa_packed", "varlen_packed"):
        record = bench.attention_path(path)
        assert record["status"] == "ok" and record["tokens_with_padding"] == record["tokens"], (path, record)
        assert record["micro_batches"] < len(bench.lengths)  # sequences share a row
        assert record["agreement"]["hidden_max_rel"] < 1e-4 and record["agreement"]["logprob_max_abs"] < 1e-4
    monkeypatch.setattr(actor_paths, "cu_seqlens_from_positions",
                        lambda positions, torch: (torch.tensor([0, positions.numel()], dtype=torch.int32),
                                                  positions.numel()))
    leaking = bench.attention_path("varlen_packed")
    assert leaking["agreement"]["hidden_max_rel"] > 1e-2, leaking


def test_log_prob_paths_give_the_same_values():
    bench = Bench(DRY, "cpu", dry_run=True, steps=1)
    values = {path: bench.logprob_path(path)[1] for path in actor_bench.LOGPROB_PATHS}
    for path, got in values.items():
        assert torch.allclose(got, values["chunked_fp32"], atol=1e-4), path


def test_the_dry_run_records_every_path_and_names_what_cannot_run_here(tmp_path, capsys):
    assert actor_bench.main(["--out", str(tmp_path), "--dry-run", "--steps", "1", "--models", "smollm2-135m"]) == 0
    record = json.loads((tmp_path / "actor_bench.json").read_text())
    model = record["models"]["smollm2-135m"]
    status = {path: r["status"] for path, r in model["attention"].items()}
    assert status["sdpa_padded"] == status["sdpa_packed"] == status["varlen_packed"] == "ok"
    assert status["flex_packed"] == "unavailable" and "CUDA" in model["attention"]["flex_packed"]["why"]
    assert {r["status"] for r in model["logprob"].values()} == {"ok"}
    assert "| varlen_packed | ok |" in (tmp_path / "actor_bench.md").read_text()
    # a new command (the kit's commands end at 10 minutes) keeps a model measured whole, and does not measure it again
    assert actor_bench.main(["--out", str(tmp_path), "--dry-run", "--steps", "1", "--models", "smollm2-135m"]) == 0
    assert "smollm2-135m: measured by an earlier command" in capsys.readouterr().out
    assert json.loads((tmp_path / "actor_bench.json").read_text())["models"]["smollm2-135m"] == model
    assert actor_bench.main(["--out", str(tmp_path), "--dry-run", "--models", "llama-70b"]) == 2
    assert "unknown ['llama-70b']" in capsys.readouterr().err


def test_without_cuda_the_real_run_says_to_use_the_dry_run(tmp_path, capsys):
    if torch.cuda.is_available():
        return
    assert actor_bench.main(["--out", str(tmp_path)]) == 2
    assert "--dry-run" in capsys.readouterr().err
    assert sys.modules["gpu_kit.actor_bench"] is actor_bench


@pytest.mark.gpu
def test_on_cuda_the_varlen_path_gives_the_padded_paths_log_probs_within_bf16_tolerance():
    """Issue 46, item 5: PyTorch's varlen kernel through our sequence bounds, against padded sdpa, in bf16 on a
    GPU (toy widths of the Qwen2.5 architecture: GQA, packed rows of several sequences)."""
    bench = Bench(Shape("qwen2.5-0.5b", 4, 2, 96, 32, 4, 400, False), "cuda", dry_run=True, steps=1)
    assert bench.attention_path("sdpa_padded")["status"] == "ok"
    record = bench.attention_path("varlen_packed")
    assert record["status"] == "ok" and record["micro_batches"] < len(bench.lengths), record
    assert record["agreement"]["hidden_max_rel"] < 2e-2 and record["agreement"]["logprob_max_abs"] < 5e-2, record


def test_the_gpu_stage_runs_every_test_file_that_marks_gpu_tests():
    """Stage e passes its files to pytest: none (the files moved into subfolders) made it collect the whole tree
    and stop at its limit before any outcome."""
    from gpu_kit.gpu_path import gpu_test_files

    files = gpu_test_files()
    assert "tests/training/test_train.py" in files and "tests/gpu_kit/test_actor_bench.py" in files


def test_a_path_whose_warm_up_outlasts_the_cap_is_recorded_slow_not_timed(monkeypatch):
    """flex attention may compile once per packed length: a warm-up past WARMUP_CAP_S is said, not waited on."""
    monkeypatch.setattr(actor_bench, "WARMUP_CAP_S", 0.0)
    record = Bench(DRY, "cpu", dry_run=True, steps=3).attention_path("sdpa_packed")
    assert record["status"] == "slow" and "not timed further" in record["why"] and "median_s" not in record


def test_the_summary_row_of_the_stage_gives_each_paths_seconds(tmp_path):
    """summary.md's row for a_actor_bench (its record carries a torch version string, which the machine stage's
    row once read as a dict: the export of the loan's first call would have failed)."""
    from gpu_kit.summary import headline

    assert actor_bench.main(["--out", str(tmp_path), "--dry-run", "--steps", "1", "--models", "smollm2-135m",
                             "--attention", "sdpa_padded,varlen_packed,flex_packed", "--logprob", "chunked_fp32"]) == 0
    record = json.loads((tmp_path / "actor_bench.json").read_text())
    row = headline({"status": "done", "results": record})
    assert row.startswith("smollm2-135m: sdpa_padded ") and "varlen_packed " in row and "flex_packed unavailable" in row
