"""The pipeline's base evaluation beside training (training/report/pipeline.py: `Beside`), with stand-in
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

from training.report.pipeline import Beside, Run

# training's stand-in: an old scoring.json is already there; the new one comes after 1 s. Then it works on until the
# evaluation beside it has finished (and 2 s more) when it succeeds, or has started when it fails: a loaded host may
# start an idle-priority process late, and the tests must not depend on how late.
TRAIN = """
import os, sys, time
from pathlib import Path
ready, written, code, seen, ended = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
time.sleep(1.0)
tmp = ready.with_suffix(".tmp"); tmp.write_text("{}"); os.replace(tmp, ready)
written.write_text(repr(time.time()))
wait_for, deadline = Path(seen + ".done" if code == 0 else seen), time.time() + 120
while not wait_for.exists() and time.time() < deadline:
    time.sleep(0.05)
time.sleep(2.0 if code == 0 else 0.0)
Path(ended).write_text(repr(time.time()))
print("training done, workers at nice", os.environ.get("RAY_worker_niceness"))
sys.exit(code)
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
    written, seen, ended = tmp_path / "written", tmp_path / "seen", tmp_path / "ended"
    train = run.start("train", [sys.executable, "-c", TRAIN, str(ready), str(written), str(train_exit), str(seen),
                                str(ended)], {}, show=True, env={"RAY_worker_niceness": "0"})  # as the pipeline does
    base = Beside(run, train, ready, "eval-base", [sys.executable, "-c", EVAL, str(seen), str(eval_seconds)], {})
    return run, train, base, written, seen, ended


def test_the_evaluation_starts_after_this_launch_writes_scoring_and_runs_at_idle_priority(tmp_path, capsys):
    run, train, base, written, seen, ended = beside_run(tmp_path, train_exit=0, eval_seconds=0.5)
    train.wait()
    base.finish()
    assert base.started is not None, "the evaluation never started"
    info = json.loads(seen.read_text())
    assert info["started"] >= float(written.read_text())  # not on the earlier launch's file
    assert info["policy"] == getattr(os, "SCHED_IDLE", info["policy"]) and info["omp"] == "1"
    record = run.record("eval-base")
    assert record["cmd"][-2:] == [str(seen), "0.5"] and record["key"] == {}
    # its own time, not the time until training ended (2 s after it)
    assert 0.5 <= record["seconds"] < float(ended.read_text()) - base.started.launched - 1.0
    assert run.done("eval-base", record["cmd"], {})  # the pipeline's own eval-base stage then skips it
    console = capsys.readouterr().out
    assert "training done, workers at nice 0" in console  # training's output is shown as it comes
    assert "[pipeline] eval-base: started beside training, in one thread at idle priority" in console
    assert "[pipeline] eval-base: finished beside training in" in console


def test_a_failed_training_stops_the_evaluation_beside_it(tmp_path):
    run, train, base, written, seen, ended = beside_run(tmp_path, train_exit=3, eval_seconds=60)
    with pytest.raises(SystemExit, match="failed \\(exit 3\\)"):
        train.wait()
    base.stop()  # what the pipeline does when training fails
    assert base.started is not None and seen.is_file()
    assert base.started.process.returncode is not None and not Path(str(seen) + ".done").exists()
    assert run.record("eval-base") is None and run.record("train") is None
