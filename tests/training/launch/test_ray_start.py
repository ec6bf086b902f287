"""Ray's node that does not start in time is started again: Ray 2.60's raylet gives its dashboard agent a fixed 15 s
(ray-project/ray#65983), which two busy cores missed in CI (the agent was ready after 19 s)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# Run at every Python start-up on PYTHONPATH: the first dashboard agent to start takes 25 s, as on a busy machine.
SLOW_AGENT = '''import os, sys, time
flag = os.environ.get("SLOW_AGENT_ONCE")
if flag and any(arg.endswith("dashboard/agent.py") for arg in sys.argv) and os.path.exists(flag):
    os.remove(flag)
    time.sleep(25)
'''


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_raylet_that_gives_up_on_a_slow_dashboard_agent_is_started_again(tiny_run, tmp_path):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_AGENT)
    flag = tmp_path / "slow-once"
    flag.touch()
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", CUDA_VISIBLE_DEVICES="",
               SLOW_AGENT_ONCE=str(flag),
               PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *tiny_run,
           "trainer.device=cpu", "trainer.total_training_steps=1", f"trainer.default_local_dir={tmp_path / 'ckpt'}",
           f"hydra.run.dir={tmp_path / 'hydra'}"]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=800)
    output = done.stdout + done.stderr
    assert not flag.exists(), "the dashboard agent never started slowly: nothing was tested"
    assert done.returncode == 0, output[-4000:]
    # the line comes only from ray.init's own "timed out during startup" (training/train_grpo.py: ray_did_not_start)
    assert "[recovered] Ray's node did not start" in output and "[step 1/1]" in output
