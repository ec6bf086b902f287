"""The console of a training run (training/launch/console.py) as a person sees it, on the tiny model: a short run prints
few lines and keeps every line of verl's in files under the run directory; a worker's failure reaches the terminal
with its last lines and its log's path. The run also starts with its first rendezvous port taken
(training/trainer/rendezvous.py) and writes TensorBoard's files under the run directory."""

import io
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from training.launch.console import failure_summary

REPO = Path(__file__).resolve().parents[3]
MAX_LINES = 80


def launch(tiny_run, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(REPO / "training" / "train_grpo.py"), "--config-name", "quickstart", *tiny_run,
           "trainer.device=cpu", "trainer.total_training_steps=2", "trainer.save_freq=-1",
           f"trainer.default_local_dir={run_dir / 'run'}", f"hydra.run.dir={run_dir / 'hydra'}", *overrides]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled",
               CUDA_VISIBLE_DEVICES="")
    return subprocess.run(cmd, cwd=run_dir, env=env, capture_output=True, text=True, timeout=900)


def screen_lines(text: str) -> list[str]:
    """The lines a terminal keeps: a progress bar's redraws (carriage returns) count once."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n") if line.rsplit("\r", 1)[-1].strip()]


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory, tiny_run):
    """Two steps with validation before and after, TensorBoard on, run from an empty folder, while another
    process holds the first port of the rendezvous range."""
    run_dir = tmp_path_factory.mktemp("console")
    with socket.socket() as squatter:
        squatter.bind(("", 0))
        taken = squatter.getsockname()[1]
        squatter.listen()
        done = launch(tiny_run, run_dir, f"env.rendezvous_ports=[{taken},{taken + 50}]",
                      "trainer.val_before_train=true", "trainer.test_freq=2", "trainer.logger=[console,tensorboard]")
    return run_dir, done


@pytest.mark.slow
def test_a_short_run_prints_our_lines_only_and_starts_with_its_port_taken(quiet_run):
    run_dir, done = quiet_run
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    lines = screen_lines(done.stdout + done.stderr)
    assert len(lines) <= MAX_LINES, "\n".join(lines)
    text = "\n".join(lines)
    for expected in (r"^\[step 1/2\] reward [\d.]+  accuracy", r"^\[step 2/2\]", r"^\[val\] before training: accuracy",
                     r"^\[val\] at step 2: accuracy", r"^\[logs\] verl, Ray and worker output: .*/run/logs",
                     r"^\[logs\] TensorBoard: tensorboard --logdir .*/run/tensorboard", r"^\[check\] device: cpu"):
        assert re.search(expected, text, re.M), f"{expected!r} not in:\n{text}"
    for wrong in ("Falling back to 'nvidia'", "target_num_threads", "pid=", "Disabled critic", "ray init kwargs"):
        assert wrong not in text, f"{wrong!r} on the console:\n{text}"


@pytest.mark.slow
def test_verl_output_is_in_files_under_the_run_directory(quiet_run):
    run_dir, done = quiet_run
    logs = run_dir / "run" / "logs"
    assert "ray init kwargs" in (logs / "driver.log").read_text()
    runner = sorted((logs / "workers").glob("_ReasoningGymTaskRunner-*.out"))
    assert runner and "actor_rollout_ref" in runner[0].read_text()  # verl's config dump
    assert list((logs / "workers").glob("WorkerDict-*.err"))
    assert list((run_dir / "run" / "tensorboard").glob("events.out.tfevents.*"))
    assert not (run_dir / "tensorboard_log").exists()
    # the start-up breakdown the driver writes when training ends (training/report/startup.py), in order from launch
    startup = json.loads((logs / "startup.json").read_text())
    whats = [event["what"] for event in startup]
    assert startup[0] == {"seconds": 0.0, "what": "launch (the driver's python starts)"}, startup
    for expected in ("Ray started", "process started: WorkerDict", "worker up: WorkerDict",
                     "ready (__init__ done): WorkerDict", "workers ready", "first rollout done", "step 1 done"):
        assert any(what.startswith(expected) for what in whats), (expected, whats)
    assert [event["seconds"] for event in startup] == sorted(event["seconds"] for event in startup)


@pytest.mark.slow
def test_a_worker_failure_reaches_the_console_with_its_log(tmp_path, tiny_run):
    done = launch(tiny_run, tmp_path, "actor_rollout_ref.actor.optim.optimizer=NoSuchOptimizer")
    assert done.returncode == 1
    err = done.stderr
    fault = [line for line in err.splitlines() if line.startswith("[fault]")]
    assert fault[0].startswith("[fault] training stopped: ") and "NoSuchOptimizer" in fault[0], err[-4000:]
    assert "Traceback" not in err and "ray.exceptions" not in err  # quiet: Ray's traceback is in error.log only
    match = re.search(r"full log of that worker: (\S+)", err)
    assert match, err[-4000:]
    log, logs = Path(match.group(1)), tmp_path / "run" / "logs"
    assert log.is_file() and log.is_relative_to(logs) and log.name.startswith("WorkerDict-"), err[-4000:]
    assert "NoSuchOptimizer" in (logs / "error.log").read_text() and f"whole traceback: {logs / 'error.log'}" in err
    assert len(screen_lines(done.stdout + err)) <= MAX_LINES


def test_failure_summary_names_the_worker_log(tmp_path):
    class WorkerError(Exception):
        pid, function_name = 4242, "WorkerDict.init_model"

    log = tmp_path / "WorkerDict-4242.err"
    text = failure_summary(WorkerError("line\n" * 100 + "AttributeError: no NoSuchOptimizer"), {4242: log}, None)
    assert "in WorkerDict.init_model" in text and "AttributeError: no NoSuchOptimizer" in text
    assert f"full log of that worker: {log}" in text and len(text.splitlines()) < 40


def test_progress_events_carry_the_step_line_and_validation():
    from training.trainer.progress import progress_event

    step = progress_event({"timing_s/step": 2.5, "env/reward": 0.25, "env/accuracy": 0.125, "response_length/mean": 40,
                           "env/zero_variance_groups": 0.5, "perf/throughput": 300.0,
                           "val-core/reasoning_gym/chain_sum/acc/mean@1": 0.5,
                           "val-core/reasoning_gym/leg_counting/acc/mean@1": 0.0,
                           "val-core/reasoning_gym/leg_counting/acc/mean@4": 1.0}, step=3, total=10)
    assert step["kind"] == "step" and step["reward"] == 0.25 and step["step_seconds"] == 2.5
    assert step["val_accuracy"] == 0.25 and step["val_sources"] == 2  # mean@1 of each task, not mean@4
    before = progress_event({"val-core/reasoning_gym/chain_sum/acc/mean@1": 0.5}, step=0, total=10)
    assert before["kind"] == "validation" and before["val_accuracy"] == 0.5
    assert progress_event({"actor/lr": 1e-5}, step=1, total=10) is None


def test_the_step_line_names_the_share_cut_per_task_only_when_any_were_cut():
    from training.launch.console import truncation_note
    from training.trainer.progress import progress_event

    data = {"timing_s/step": 2.0, "env/reward": 0.1, "env/truncated": 0.375, "env/truncated/sums": 0.75,
            "env/truncated/spell": 0.0}
    event = progress_event(data, step=1, total=2)
    assert event["truncated"] == 0.375 and event["truncated_tasks"] == {"sums": 0.75}
    assert truncation_note(event) == "  cut at max_response_length 38% (sums 75%)"
    calm = progress_event({**data, "env/truncated": 0.0, "env/truncated/sums": 0.0}, step=1, total=2)
    assert "truncated_tasks" not in calm and truncation_note(calm) == ""


def test_every_logged_number_is_kept_whole_in_metrics_jsonl_across_a_resume(tmp_path):
    """metrics.jsonl holds every number verl logs, exactly, however long the step's console line: the console line
    reaches the driver through Ray's log monitor, which can cut it (CI of 21748d5 lost a step's last key that way)."""
    import numpy as np

    from training.trainer.progress import ProgressTracking
    from utils.metrics_file import read_metrics

    class Tracking:  # verl's Tracking's interface: log(data=, step=, backend=)
        def __init__(self):
            self.logged = []

        def log(self, data, step, backend=None):
            self.logged.append((step, data))

    data = {f"training/metric_{i:03d}/min": np.float64(i / 3) for i in range(200)}  # a ~6 KiB console line
    data.update({"training/off_policy/trajectory_staleness_worst/min": np.int64(0), "note": "text",
                 "tensor": object()})
    verl = Tracking()
    first = ProgressTracking(verl, tmp_path, total_steps=3)
    first.log(data={**data, "timing_s/step": 1.0}, step=1)
    first.log(data={"actor/lr": 1e-5}, step=2)
    assert len(verl.logged) == 2  # verl's backends still get every call
    with open(tmp_path / "metrics.jsonl", "a") as cut:  # the first process killed mid-line
        cut.write('{"step": 3, "data": {"actor/l')
    resumed = ProgressTracking(Tracking(), tmp_path, total_steps=3)  # a new process appends; step 2 taken again
    resumed.log(data={"actor/lr": 2e-5}, step=2)
    steps = read_metrics(tmp_path)
    assert sorted(steps) == [1, 2] and steps[2] == {"actor/lr": 2e-5}
    assert steps[1]["training/metric_199/min"] == 199 / 3 and steps[1]["timing_s/step"] == 1.0
    assert steps[1]["training/off_policy/trajectory_staleness_worst/min"] == 0
    assert "note" not in steps[1] and "tensor" not in steps[1]  # numbers only, as verl's console line
    assert len((tmp_path / "progress.jsonl").read_text().splitlines()) == 1  # the console's view: the step line


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream_type, draws_bar", [(io.StringIO, False), (Terminal, True)])
def test_the_step_bar_is_drawn_on_a_terminal_and_left_out_of_a_redirected_log(tmp_path, stream_type, draws_bar):
    from training.launch.console import ProgressPrinter

    stream = stream_type()
    printer = ProgressPrinter(tmp_path / "progress.jsonl", stream, started=0.0)
    printer.show({"kind": "train_begin", "step": 1, "total": 2})
    for step in (1, 2):
        printer.show({"kind": "step", "step": step, "total": 2, "reward": 0.5, "step_seconds": 3.0})
        printer.bar.refresh()  # what the thread does each second during a step
    printer.bar.close()
    text = stream.getvalue()
    lines = screen_lines(text)
    assert lines[0].startswith("[step 1/2] reward 0.500") and lines[1].startswith("[step 2/2]"), lines
    assert ("steps:" in text) is draws_bar and ("\r" in text) is draws_bar, text


def test_the_step_line_says_what_the_update_left_out_and_a_step_it_did_not_take():
    """training/zero_advantage/rules.py's metrics on the step line: the share left out, or no optimizer step at all."""
    from training.launch.console import skip_note
    from training.trainer.progress import progress_event

    def note(sequences, optimizer_step):
        return skip_note(progress_event({"timing_s/step": 2.0, "actor/update_skipped/sequences": sequences,
                                         "actor/update_skipped/tokens": sequences,
                                         "actor/update_skipped/optimizer_step": optimizer_step}, step=1, total=2))

    assert note(0.625, 0.0) == "  update skipped 62% (zero advantage)"
    assert note(1.0, 1.0) == "  no optimizer step (every sequence had advantage 0)"
    assert note(0.75, 0.5) == "  update skipped 75% (zero advantage), no optimizer step on 50% of mini-batches"
    assert note(0.0, 0.0) == "" and skip_note(progress_event({"timing_s/step": 2.0}, step=1, total=2)) == ""


def test_the_step_line_of_an_async_run_says_what_it_carried_over():
    """Async mode's metrics on the step line (training/trainer/trainer.py carried_over_metrics, verl's staleness);
    a sync run's line has no note."""
    from training.launch.console import carried_note
    from training.trainer.progress import progress_event

    event = progress_event({"timing_s/step": 2.0, "async/carried_over": 0.375, "async/resumed": 0.125,
                            "training/off_policy/trajectory_staleness_worst/max": 1}, step=3, total=4)
    assert carried_note(event) == "  carried over 38% (resumed 12%, staleness <= 1)"
    assert carried_note(progress_event({"timing_s/step": 2.0}, step=1, total=2)) == ""
