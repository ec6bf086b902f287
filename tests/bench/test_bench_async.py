"""bench/bench_async.py: both arms are the CPU quickstart one key apart, and the table reads their records (no
training here; the async run itself is tests/training/test_train.py's)."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_async", REPO / "bench" / "bench_async.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_arms_differ_only_in_the_trainer_and_pass_the_launch_checks(bench):
    from training.launch.checks import trainer_mode_problems
    from training.launch.config import compose_config
    from training.launch.hardware import apply_cpu_overrides

    sync, async_ = (bench.arm_overrides(mode, 128, 20) for mode in ("sync", "async"))
    assert [o for o in sync if "trainer_mode" not in o] == [o for o in async_ if "trainer_mode" not in o]
    for overrides, mode in ((sync, "reasoning_gym"), (async_, "reasoning_gym_async")):
        cfg = compose_config("quickstart", [*overrides, "trainer.device=cpu"])
        apply_cpu_overrides(cfg, {o.split("=", 1)[0] for o in overrides})  # the command line wins over env.on_cpu
        assert cfg.trainer.v1.trainer_mode == mode and trainer_mode_problems(cfg) == []
        assert cfg.data.max_response_length == 128 and cfg.trainer.total_training_steps == 20


def record(bench, mode: str, step_seconds: list[float], carried: float | None) -> dict:
    metrics = {step: {"timing_s/step": s, "timing_s/gen": s / 2, "timing_s/update_actor": s / 3,
                      "response_length/mean": 40.0, "response_length/clip_ratio": 0.25,
                      **({"async/carried_over": carried, "async/resumed": carried / 2,
                          "training/off_policy/trajectory_staleness_worst/max": 1} if carried is not None else {})}
               for step, s in enumerate(step_seconds, start=1)}
    row = {"base": 0.35, "trained": 0.45, "paired_delta": 0.1, "ci95": [0.05, 0.15], "verdict": "better (resolved)"}
    return {"mode": mode, "length": 128, "seed": 0, "train_seconds": 60.0 + sum(step_seconds),
            "rows": {bench.BEYOND: row}, "verdict": "Training helped: ...", "series": bench.step_series(metrics)}


def test_the_table_gives_each_arm_and_the_ratio_of_their_mean_steps(bench, tmp_path):
    records = [record(bench, "sync", [90.0, 40.0, 42.0, 38.0], None),
               record(bench, "async", [95.0, 20.0, 22.0, 18.0], 0.4)]
    summary = bench.summary(records[1])
    assert summary["step1_s"] == 95.0 and summary["step"]["mean"] == pytest.approx(20.0)  # step 1 apart
    assert summary["carried_over"] == pytest.approx(0.4) and summary["staleness_max"] == 1
    assert "carried_over" not in bench.summary(records[0])
    text = bench.table(records)
    assert "| sync 128 tok, seed 0 | 4 |" in text and "| 40% (20%, 1) |" in text
    assert "async / sync mean step at 128 tokens, seed 0: 0.50x [" in text
    ratio, lo, hi = bench.ratio_interval([20.0, 22.0, 18.0], [40.0, 42.0, 38.0])
    assert ratio == pytest.approx(0.5) and lo <= ratio <= hi < 1
    bench.plot(records, tmp_path / "async.png")
    assert (tmp_path / "async.png").stat().st_size > 1000
