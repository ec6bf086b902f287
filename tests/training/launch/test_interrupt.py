"""A Ctrl-C during training always ends the launch as interrupted, and a SIGTERM as stopped, with the resume command
(training/launch/stops.py), also when a library catches the KeyboardInterrupt on its way up or the job's Ray cluster
dies before the signal arrives."""

from __future__ import annotations

import os
import signal
import time

from training.launch.stops import interrupt_remembered


def test_a_ctrl_c_that_a_library_swallowed_is_still_remembered():
    before = signal.getsignal(signal.SIGINT)
    interrupted = []
    with interrupt_remembered(interrupted):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs, and raises, at the next bytecode
            raise AssertionError("SIGINT raised nothing")
        except KeyboardInterrupt:
            pass  # what a library on the way up might do
    assert interrupted == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is before


def test_no_ctrl_c_leaves_nothing_remembered():
    interrupted = []
    with interrupt_remembered(interrupted):
        pass
    assert interrupted == []


def test_verl_creates_the_task_runner_right_after_ray_init():
    """AfterRayInit installs the SIGTERM handler when run_ppo creates the task runner: that must come after
    run_ppo's ray.init (whose handlers it replaces) and be the way run_ppo creates it (.remote() or .options())."""
    import inspect

    from verl.trainer.main_ppo import run_ppo

    source = inspect.getsource(run_ppo)
    assert source.index("ray.init(") < source.index("task_runner_class.remote()")
    assert source.index("ray.init(") < source.index("task_runner_class.options(")


def test_a_sigterm_after_ray_init_ends_the_launch_as_stopped(tmp_path):
    """Ray's handler (from ray.init) would stop Ray and exit 1; once the task runner is created ours replaces it: a
    SIGTERM raises Terminated, which driver_console passes on as it does Ctrl-C (not as a training failure)."""
    import sys

    import pytest
    from omegaconf import OmegaConf

    from training.launch.console import Terminated, driver_console
    from training.launch.stops import AfterRayInit, sigterm_stops_training

    class Actor:
        @staticmethod
        def remote():
            return "actor"

    cfg = OmegaConf.create({"env": {"logs_dir": str(tmp_path / "logs"), "console": "verbose"}})
    before = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))  # what ray.init leaves installed
    try:
        with sigterm_stops_training() as on_ray_ready:  # nothing happens: Ray's handler is put back
            pass
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        with pytest.raises(Terminated):
            with driver_console(cfg, time.time()), sigterm_stops_training() as on_ray_ready:
                assert AfterRayInit(Actor, on_ray_ready).remote() == "actor"
                try:
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(5)
                    raise AssertionError("SIGTERM raised nothing")
                except Terminated:
                    raise KeyboardInterrupt  # what ray.get makes of it (a real run ended "interrupted", exit 130)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # a second SIGTERM ends the process at once
        assert not (tmp_path / "logs" / "error.log").exists()  # not recorded as a failure
    finally:
        signal.signal(signal.SIGTERM, before)


def test_the_stop_is_said_on_the_terminal_before_rays_shutdown(tmp_path, monkeypatch, capfd):
    """A scheduler's SIGKILL follows its SIGTERM after a grace (SLURM's KillWait, 30 s) that Ray's shutdown can
    outlast when the cluster's head stops too (a CI job was killed in it, its output without the line): the line
    reaches the terminal (not driver.log) before the shutdown starts, and run() does not say it twice."""
    import pytest
    from omegaconf import OmegaConf

    from training.launch import console
    from training.launch.console import Terminated, driver_console, say_stop

    cfg = OmegaConf.create({"env": {"logs_dir": str(tmp_path / "logs"), "console": "quiet"}})
    said_before_shutdown = []
    monkeypatch.setattr(console, "shutdown_ray", lambda: said_before_shutdown.append(capfd.readouterr().err))
    with pytest.raises(Terminated) as stop:
        with driver_console(cfg, time.time()):
            raise Terminated("SIGTERM")
    assert "[train] stopped by SIGTERM; to resume from the last checkpoint: python " in said_before_shutdown[0]
    assert "stopped by SIGTERM" not in (tmp_path / "logs" / "driver.log").read_text()
    say_stop(stop.value)
    assert "[train]" not in capfd.readouterr().err
    say_stop(KeyboardInterrupt())  # a Ctrl-C that never passed the console (a library swallowed it) is said by run()
    assert "[train] interrupted; to resume from the last checkpoint: python " in capfd.readouterr().err


def sigterm_in(body, tmp_path, capfd):
    """Runs `body(send, sent)` inside the launch's stops_and_console (quiet) with our handler installed, `send`
    sending this process SIGTERM; returns (the exception the launch ended with, the terminal's stderr when the body
    called `sent()`)."""
    import pytest
    from omegaconf import OmegaConf

    from training.launch.stops import stops_and_console

    cfg = OmegaConf.create({"env": {"logs_dir": str(tmp_path / "logs"), "console": "quiet"}})
    said = []

    def send():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    def sent():
        said.append(capfd.readouterr().err)

    before = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(KeyboardInterrupt) as stop:
            with stops_and_console(cfg, time.time(), []) as install:
                install()
                body(send, sent)
    finally:
        signal.signal(signal.SIGTERM, before)
    return stop.value, (said or [""])[0]


def test_a_sigterm_is_said_at_once_and_ends_the_launch_even_when_a_library_swallows_it(tmp_path, capfd):
    """The line is on the terminal the moment the handler runs (in CI a scancelled job twice had none: what came after
    the signal lost it or outlasted SLURM's 30 s grace); a Terminated that some library catches on its way up (a
    __del__ or a callback) still ends the launch as stopped, not as a finished run."""
    from training.launch.console import Terminated

    def swallowed(send, sent):
        try:
            send()
        except KeyboardInterrupt:
            sent()

    stop, said = sigterm_in(swallowed, tmp_path, capfd)
    assert isinstance(stop, Terminated)
    assert "[train] stopped by SIGTERM; to resume from the last checkpoint: python " in said
    assert "stopped by SIGTERM" not in capfd.readouterr().err  # said once
    assert not (tmp_path / "logs" / "error.log").exists()


def test_a_sigterm_that_ray_get_hands_on_as_a_plain_ctrl_c_is_said_once_as_a_sigterm(tmp_path, capfd):
    """ray.get raises a new KeyboardInterrupt for the handler's Terminated: the launch still ends as stopped, with no
    "[train] interrupted" line after the SIGTERM's (the SLURM jobs' output had both)."""
    from training.launch.console import Terminated

    def converted(send, sent):
        try:
            send()
        except Terminated:
            sent()
            raise KeyboardInterrupt from None

    stop, said = sigterm_in(converted, tmp_path, capfd)
    assert isinstance(stop, Terminated)
    assert "[train] stopped by SIGTERM; to resume from the last checkpoint: python " in said
    assert "[train]" not in capfd.readouterr().err  # neither said again nor "interrupted"


def test_a_worker_failure_after_a_sigterm_ends_the_launch_as_stopped_not_failed(tmp_path, capfd):
    """A scheduler stops the whole job: the Ray cluster's head dies with the driver's SIGTERM, and the driver's wait on
    the trainer can fail before the signal's exception arrives. That failure is the stop's doing."""
    from training.launch.console import Terminated

    def cluster_died(send, sent):
        try:
            send()
        except KeyboardInterrupt:
            sent()
            raise RuntimeError("The actor died unexpectedly before finishing this task.") from None

    stop, said = sigterm_in(cluster_died, tmp_path, capfd)
    assert isinstance(stop, Terminated) and isinstance(stop.__cause__, RuntimeError)
    assert "[train] stopped by SIGTERM" in said
    assert not (tmp_path / "logs" / "error.log").exists()


def test_a_sigterm_that_comes_after_the_cluster_died_still_ends_the_launch_as_stopped(tmp_path, monkeypatch, capfd):
    """A scancelled SLURM job: its Ray nodes stopped first, the driver's wait on the trainer failed, and the SIGTERM
    reached the driver during the failure's clean-up (Ray's shutdown on a dead cluster, which can hang): the line is
    said the moment the signal arrives, not by the handler `ray.init` left, the launch ends as stopped, and the
    terminal is given back."""
    from training.launch import console
    from training.launch.console import Terminated

    def hung_shutdown():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        raise AssertionError("SIGTERM raised nothing")

    def cluster_died(send, sent):
        monkeypatch.setattr(console, "shutdown_ray", hung_shutdown)
        raise RuntimeError("The actor died unexpectedly before finishing this task.")

    stop, _ = sigterm_in(cluster_died, tmp_path, capfd)
    assert isinstance(stop, Terminated)
    terminal = capfd.readouterr().err
    assert "[train] stopped by SIGTERM; to resume from the last checkpoint: python " in terminal
    assert "stopped by SIGTERM" not in (tmp_path / "logs" / "driver.log").read_text()
    assert not (tmp_path / "logs" / "error.log").exists()
    print("back")  # fd 1 is the terminal again, not driver.log
    assert "back" in capfd.readouterr().out


_HELD_MAIN_THREAD = """
import os, signal, sys, time
from omegaconf import OmegaConf
from training.launch import console
from training.launch.stops import stops_and_console
cfg = OmegaConf.create({"env": {"logs_dir": sys.argv[1], "console": "quiet"}})
with stops_and_console(cfg, time.time(), []) as install:
    install()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the signal reaches another thread; this one runs
    os.write(console.STOP_LINE["fd"], b"READY\\n")               # no handler until it is back in Python, as in a
    time.sleep(60)                                                # C call that does not check for signals
"""


def ready_child(script: str, tmp_path):
    """Runs `script` (a launch with its console; argv[1] its logs folder) until it writes READY to its terminal, a file
    here; returns the process and that file."""
    import subprocess
    import sys
    from pathlib import Path

    terminal = tmp_path / "terminal.txt"
    with open(terminal, "w") as out:
        child = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "logs")], stderr=out,
                                 cwd=Path(__file__).resolve().parents[3])
    deadline = time.monotonic() + 60
    while "READY" not in terminal.read_text() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if "READY" not in terminal.read_text():
        child.kill()
        raise AssertionError(terminal.read_text()[-3000:])
    return child, terminal


def test_the_sigterm_line_is_said_while_the_main_thread_is_held_in_c_code(tmp_path):
    """Python runs signal handlers in the main thread only, between bytecodes: a main thread held in a C call that
    does not check for signals would say nothing before a scheduler's SIGKILL. The watcher thread says it at once,
    whichever thread the signal reaches."""
    child, terminal = ready_child(_HELD_MAIN_THREAD, tmp_path)
    try:
        child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while "stopped by SIGTERM" not in terminal.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "[train] stopped by SIGTERM; to resume from the last checkpoint" in terminal.read_text()
        assert child.poll() is None  # said while the main thread was still held
    finally:
        child.kill()
        child.wait()


_SAYING_HELD = """
import os, sys, threading, time
from omegaconf import OmegaConf
from training.launch import console
from training.launch.console import Terminated
from training.launch.stops import stops_and_console
cfg = OmegaConf.create({"env": {"logs_dir": sys.argv[1], "console": "quiet"}})
held = threading.Event()
def hold():  # the line takes 3 s to say (a busy machine): both SIGTERMs come before it is out
    with console._SAYING:
        held.set()
        time.sleep(3)
try:
    with stops_and_console(cfg, time.time(), []) as install:
        install()
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        os.write(console.STOP_LINE["fd"], b"READY\\n")  # the terminal: fd 2 is driver.log now
        time.sleep(60)
except Terminated:
    sys.exit(143)
"""


def test_a_second_sigterm_while_the_line_is_said_does_not_end_the_process_before_it(tmp_path):
    """Two SIGTERMs can come close together (a supervisor that signals the process and its group, a second `kill`):
    the handler puts the default action back only once the line is out, so the second one cuts nothing short."""
    child, terminal = ready_child(_SAYING_HELD, tmp_path)
    try:
        child.send_signal(signal.SIGTERM)
        time.sleep(1)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 143, terminal.read_text()[-3000:]
        assert terminal.read_text().count("[train] stopped by SIGTERM; to resume from the last checkpoint") == 1
    finally:
        child.kill()
        child.wait()
