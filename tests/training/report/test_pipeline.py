"""`python -m training.pipeline`: train, export, evaluate base and trained, compare, in one run folder; a rerun
skips what is done. On the tiny model with the CPU backend (the quickstart config, two steps)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EVAL = ["--eval-config", "configs/eval/smoke.yaml", "--eval-backend", "hf", "--eval-override", "suite.size=2",
        "--eval-override", "suite.composites.mixed.size=2", "--eval-override", "sampling.n=1",
        "--eval-override", "sampling.max_tokens=8", "--eval-override", "pass_k=[1]"]


def pipeline(run_dir: Path, tiny_run: list[str], *extra: str) -> str:
    cmd = [sys.executable, "-m", "training.pipeline", "--config-name", "quickstart", "--run-dir", str(run_dir), *EVAL,
           *extra, *tiny_run, "trainer.total_training_steps=2", "trainer.save_freq=2", "trainer.device=cpu"]
    # the evaluation cache (base results) in the test's own folder
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="",
               RG_GRPO_CACHE=str(run_dir.parent / "cache"))
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return done.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_pipeline_trains_exports_evaluates_compares_and_resumes(tmp_path, tiny_run):
    run_dir = tmp_path / "run"
    first = pipeline(run_dir, tiny_run)
    for stage in ("train", "export", "eval-base", "eval-trained", "compare"):
        assert f"[pipeline] {stage}: finished" in first
        assert (run_dir / "stages" / f"{stage}.json").is_file()
    assert (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (run_dir / "model" / "config.json").is_file()
    for side in ("base", "trained"):
        assert json.loads((run_dir / "eval" / side / "results.json").read_text())
    compare = run_dir / "eval" / "compare"
    assert any(compare.glob("*.md")) and any(compare.glob("*.png"))
    # both sides scored as the quickstart trains (its env.reward, via --from-run), and the verdict printed
    for side in ("base", "trained"):
        run = json.loads((run_dir / "eval" / side / "results.json").read_text())["run"]
        assert run["reward"]["answer_fallback"] == "last_number" and run["reward"]["partial_credit"] is True
        assert run["system_prompt"].startswith("Answer with the final result only")
    assert "[pipeline] held-out evaluation, base vs trained (step 2)" in first
    assert "  overall " in first and "resolved" in first
    # the console ends with the verdict in one sentence; summary.png draws it beside the validation curve
    last = first.strip().splitlines()[-1]
    assert last.startswith("[pipeline] verdict: ") and last.count(". ") == 0 and "accuracy went from" in last
    assert (run_dir / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    again = pipeline(run_dir, tiny_run)
    assert all(f"[pipeline] {stage}: done earlier" in again
               for stage in ("train", "export", "eval-base", "eval-trained", "compare"))
    # an existing run (--trained, as `make quickstart` does): no training, the base model's results from the cache
    other = pipeline(tmp_path / "other", tiny_run, "--trained", str(run_dir / "checkpoints"))
    assert "[pipeline] train" not in other and "[pipeline] compare: finished" in other
    assert "(hit)" in (tmp_path / "other" / "logs" / "eval-base.log").read_text()
