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
