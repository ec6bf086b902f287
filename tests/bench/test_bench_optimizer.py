"""bench/bench_optimizer.py: every arm steps the FSDP2-sharded tiny model, and foreach and fused end where the loop
ends (the comparison is of the same update)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_each_arm_steps_the_sharded_model_to_the_loops_weights():
    done = subprocess.run([sys.executable, "bench/bench_optimizer.py", "--model", "tiny", "--steps", "2",
                           "--threads", "1"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in done.stdout.splitlines()
            if line.startswith(("| loop ", "| foreach ", "| fused "))}
    assert sorted(rows) == ["foreach", "fused", "loop"], done.stdout
    assert float(rows["loop"][-1].strip(" |")) == 0.0
    assert all(float(rows[arm][-1].strip(" |")) < 1e-6 for arm in ("foreach", "fused")), done.stdout
