"""The pipeline's base evaluation beside training (training/report/pipeline.py: `start_beside`), with stand-in
commands for both: it starts only once training has written this launch's scoring.json (what `--from-run` reads),
runs in one thread at idle priority, is recorded like any stage, and is stopped when training fails. The real thing
(train_grpo.py beside evaluate_model.py) runs in tests/training/test_train.py's pipeline test."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from training.report.pipeline import Run, start_beside

# training's stand-in: an old scoring.json is already there; the new one comes after 1 s; then it works 3 s more
TRAIN = """
import os, sys, time
from pathlib import Path
ready = Path(sys.argv[1])
time.sleep(1.0)
tmp = ready.with_suffix(".tmp"); tmp.write_text("{}"); os.replace(tmp, ready)
Path(sys.argv[2]).write_text(repr(time.time()))
time.sleep(3.0)
print("training done, workers at nice", os.environ.get("RAY_worker_niceness"))
sys.exit(int(sys.argv[3]))
"""
# the evaluator's stand-in: says when it started, its scheduling policy and thread setting, then works a while
EVAL = """
import json, os, sys, time
from pathlib import Path
Path(sys.argv[1]).write_text(json.dumps({"started": time.time(), "policy": os.sched_getscheduler(0),
                                         "omp": os.environ.get("OMP_NUM_THREADS")}))
time.sleep(float(sys.argv[2]))
Path(sys.argv[1] + ".done").write_text("done")
"""


def beside_run(tmp_path: Path, train_exit: int, eval_seconds: float):
    ready = tmp_path / "ckpt" / "scoring.json"
    ready.parent.mkdir()
    ready.write_text("{}")  # an earlier launch's: must not start the evaluation
    old = time.time() - 60
    os.utime(ready, (old, old))
    run = Run(tmp_path / "run")
    written, seen = tmp_path / "written", tmp_path / "seen"
    train = run.start("train", [sys.executable, "-c", TRAIN, str(ready), str(written), str(train_exit)], {},
                      show=True, env={"RAY_worker_niceness": "0"})  # what the pipeline gives training beside it
    base = start_beside(run, train, ready, "eval-base", [sys.executable, "-c", EVAL, str(seen), str(eval_seconds)],
                        {})
    return run, train, base, written, seen


def test_the_evaluation_starts_after_this_launch_writes_scoring_and_runs_at_idle_priority(tmp_path, capsys):
    run, train, base, written, seen = beside_run(tmp_path, train_exit=0, eval_seconds=0.5)
    train.wait()
    base[0].join(timeout=10)
    assert len(base) == 2, "the evaluation never started"
    base[1].wait()
    info = json.loads(seen.read_text())
    assert info["started"] >= float(written.read_text())  # not on the earlier launch's file
    assert info["policy"] == getattr(os, "SCHED_IDLE", info["policy"]) and info["omp"] == "1"
    record = run.record("eval-base")
    assert record["cmd"][-2:] == [str(seen), "0.5"] and record["key"] == {}
    assert record["seconds"] < 2.5  # its own time (0.5 s of work), not the 3 s until training ended
    assert run.done("eval-base", record["cmd"], {})  # the pipeline's own eval-base stage then skips it
    console = capsys.readouterr().out
    assert "training done, workers at nice 0" in console  # training's output is shown as it comes
    assert "[pipeline] eval-base: started beside training, in one thread at idle priority" in console
    assert "[pipeline] eval-base: finished beside training in" in console


def test_a_failed_training_stops_the_evaluation_beside_it(tmp_path):
    run, train, base, written, seen = beside_run(tmp_path, train_exit=3, eval_seconds=60)
    with pytest.raises(SystemExit, match="failed \\(exit 3\\)"):
        train.wait()
    base[0].join(timeout=10)
    assert len(base) == 2 and seen.is_file()
    base[1].stop()  # what the pipeline's `finally` does
    assert base[1].process.returncode is not None and not Path(str(seen) + ".done").exists()
    assert run.record("eval-base") is None and run.record("train") is None
