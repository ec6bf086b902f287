"""A Ctrl-C during training always ends the launch as interrupted (training/train_grpo.py's interrupt_remembered),
also when a library catches the KeyboardInterrupt on its way up."""

from __future__ import annotations

import os
import signal
import time

from training.train_grpo import interrupt_remembered


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


def test_a_sigterm_ends_the_launch_as_stopped_not_failed(tmp_path):
    """Ray's driver turns SIGTERM into SystemExit(15) (its handler in ray.init, pinned below); the launch reads that
    as a stop asked from outside (exit 143 and the resume command), not as a training failure."""
    import inspect
    import sys

    import pytest
    import ray._private.worker
    from omegaconf import OmegaConf

    from training.launch.console import Terminated, driver_console

    assert "sys.exit(signum)" in inspect.getsource(ray._private.worker.init)
    cfg = OmegaConf.create({"env": {"logs_dir": str(tmp_path / "logs"), "console": "verbose"}})
    before = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # what ray.init installs
    try:
        with pytest.raises(Terminated):
            with driver_console(cfg, time.time()):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
                raise AssertionError("SIGTERM raised nothing")
    finally:
        signal.signal(signal.SIGTERM, before)
