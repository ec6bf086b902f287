"""bench/bench_precision.py: both samplers and both actor precisions run on the same rows, and the fp32 actor
reproduces the fp32 sampler's log-probs (the pairing a CPU run trains with)."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_fp32_actor_agrees_with_the_fp32_sampler_and_every_arm_is_timed():
    done = subprocess.run([sys.executable, "bench/bench_precision.py", "--model", "tiny", "--prompts", "2",
                           "--samples", "2", "--tokens", "6", "--micro-batch", "2", "--repeats", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    timed = [line.split(" | ")[0].strip("| ") for line in done.stdout.splitlines() if line.startswith("| sampling")
             or line.startswith("| actor")]
    assert timed == ["sampling, fp32 weights", "sampling, bf16 weights", "sampling, bf16 autocast",
                     "actor forward + backward, fp32", "actor forward + backward, bf16 autocast"], done.stdout
    pairs = {tuple(cell.strip() for cell in line.strip("|").split("|")[:2]): float(line.split("|")[3])
             for line in done.stdout.splitlines() if line.startswith(("| fp32 weights", "| bf16 "))}
    assert len(pairs) == 6, done.stdout
    assert pairs[("fp32 weights", "fp32")] < 1e-4  # same precision, same numbers (up to kernel shapes)
    assert "CPU bf16 units:" in done.stdout
