"""utils/compare_runs.py on run folders written as a run writes them (metrics.jsonl, progress.jsonl, generation
dumps): what it calls the same run, and what `--training-only` leaves out. Checkpoints and TensorBoard are compared in
tests/training/test_train.py's real runs."""

import json
from pathlib import Path

from utils.compare_runs import main


def write_run(run: Path, *, validated: bool, grad_norm: float = 1.8) -> Path:
    (run / "logs").mkdir(parents=True)
    (run / "generations" / "train").mkdir(parents=True)
    steps = [{"step": 1, "data": {"actor/grad_norm": grad_norm, "timing_s/gen": 12.9}},
             {"step": 2, "data": {"actor/grad_norm": 1.5, "timing_s/gen": 14.0}}]
    progress = [{"kind": "step", "step": 1, "total": 2, "reward": 0.09, "time": 1.0},
                {"kind": "step", "step": 2, "total": 2, "reward": 0.14, "time": 2.0}]
    if validated:
        steps.insert(0, {"step": 0, "data": {"val-core/reasoning_gym/chain_sum/acc/mean@1": 0.17}})
        steps[-1]["data"]["val-core/reasoning_gym/chain_sum/acc/mean@1"] = 0.53
        progress.insert(0, {"kind": "validation", "step": 0, "val_accuracy": 0.17, "time": 0.5})
        progress[-1]["val_accuracy"] = 0.53
        (run / "generations" / "val").mkdir()
        (run / "generations" / "val" / "0.jsonl").write_text(json.dumps({"output": "4", "score": 1.0}) + "\n")
    (run / "logs" / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in steps))
    (run / "logs" / "progress.jsonl").write_text("".join(json.dumps(row) + "\n" for row in progress))
    (run / "generations" / "train" / "1.jsonl").write_text(json.dumps({"output": "7", "uid": "x"}) + "\n")
    return run


def test_a_run_that_validates_is_the_same_training_run_only_with_training_only(tmp_path, capsys):
    plain, validated = write_run(tmp_path / "a", validated=False), write_run(tmp_path / "b", validated=True)
    assert main([str(validated), str(plain)]) == 1
    said = capsys.readouterr().out
    assert "generations/val/0.jsonl" in said and "metrics.jsonl step 2" in said and "progress.jsonl step 2" in said
    assert main([str(validated), str(plain), "--training-only"]) == 0
    assert "the two runs are the same run (times, rates and memory apart, validation left out)" in capsys.readouterr().out


def test_training_only_still_sees_a_training_difference(tmp_path, capsys):
    plain, validated = write_run(tmp_path / "a", validated=False), write_run(tmp_path / "b", validated=True,
                                                                              grad_norm=1.9)
    assert main([str(validated), str(plain), "--training-only"]) == 1
    assert "metrics.jsonl step 1" in capsys.readouterr().out
