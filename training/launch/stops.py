"""How the driver's launch meets a stop from outside: Ctrl-C (SIGINT) and a scheduler's SIGTERM each end it with the
resume command, however the libraries on the way handle the exception, and the SIGTERM's line reaches the terminal
within a scheduler's grace (SLURM's KillWait, 30 s) also when the job's Ray cluster died first."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from omegaconf import DictConfig

from training.launch.console import Terminated, driver_console, say_stop


@contextlib.contextmanager
def stops_and_console(cfg: DictConfig, started: float, interrupted: list):
    """driver_console inside the SIGTERM handler's reach; yields the handler's `install`. A scancelled SLURM job's
    Ray nodes get their SIGTERM with the driver's, and the driver's wait on the trainer can fail first: the failure's
    clean-up (Ray's shutdown, on a dead cluster, 6-16 s here) must still meet this handler, which says the line, not
    the one `ray.init` left (sys.exit). (When the head's raylet goes first, Ray's core worker can end the driver before
    any handler runs; the SLURM script says the stop then: docs/examples/slurm_multinode.sh.)"""
    with sigterm_stops_training() as install, driver_console(cfg, started), interrupt_remembered(interrupted):
        yield install


@contextlib.contextmanager
def interrupt_remembered(interrupted: list):
    """While training, SIGINT raises KeyboardInterrupt as usual and is also remembered in `interrupted`. In one CI
    run a Ctrl-C sent after step 1 never surfaced and the run trained to its end with exit 0; whatever swallowed it,
    the launch now ends interrupted (exit 130, the resume command)."""
    def on_sigint(signum, frame):
        interrupted.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class AfterRayInit:
    """Stands in for the task runner's actor class in verl's `run_ppo`, which creates that actor right after its
    `ray.init`: the first moment the driver can install its own SIGTERM handler over the one `ray.init` installs.
    Ray's handler stops Ray's processes and exits 1, and the process then aborted (a real run, 2026-11-26: exit 134,
    "[fault] training stopped: 1")."""

    def __init__(self, actor_class, on_ray_ready):
        self.actor_class, self.on_ray_ready = actor_class, on_ray_ready

    def remote(self, *args, **kwargs):
        self.on_ray_ready()
        return self.actor_class.remote(*args, **kwargs)

    def options(self, **kwargs):
        self.on_ray_ready()
        return self.actor_class.options(**kwargs)


@contextlib.contextmanager
def sigterm_stops_training():
    """Yields `install`: from then on SIGTERM says "[train] stopped by SIGTERM" at once and raises Terminated in the
    main thread, which ends the launch like Ctrl-C (Ray shut down) with exit 143. Whatever the block does after the
    signal (a library swallows the exception, the job's Ray cluster stops with it and a worker dies) ends it as
    Terminated too. A second SIGTERM during that clean-up ends the process at once (the guardian removes what is
    left). Without a SIGTERM, the handler in place before `install` is put back when the block has ended."""
    previous, received, watchers = [], [], []

    def on_sigterm(signum, frame):
        if received:  # a second SIGTERM while the first one's line is being said: that call says it and raises
            return
        received.append(signum)
        stop = Terminated("SIGTERM")
        say_stop(stop)  # before the default action is back: a second SIGTERM must not end the process before the line
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        raise stop

    def install():
        if not previous:
            previous.append(signal.signal(signal.SIGTERM, on_sigterm))
            watchers.append(SigtermWatcher())

    try:
        yield install
    except BaseException as err:
        if received and not isinstance(err, Terminated):  # ray.get makes a plain KeyboardInterrupt of it
            raise Terminated("SIGTERM") from err
        raise
    else:
        if received:
            raise Terminated("SIGTERM")
    finally:
        for watcher in watchers:
            watcher.close()
        if previous and not received:
            signal.signal(signal.SIGTERM, previous[0])


class SigtermWatcher(threading.Thread):
    """Says the SIGTERM line from a thread of its own the moment the signal arrives. Python runs a handler in the
    main thread only, between bytecodes: a main thread held in a C call that does not check for signals would say
    nothing before a scheduler's SIGKILL. The C-level handler writes the signal's number to the wakeup fd at once,
    from any thread, and this thread wakes on it (set_wakeup_fd: made from the main thread, as `install` is)."""

    def __init__(self):
        super().__init__(name="sigterm-watcher", daemon=True)
        self.read_end, self.write_end = os.pipe()
        os.set_blocking(self.write_end, False)
        self.previous_fd = signal.set_wakeup_fd(self.write_end, warn_on_full_buffer=False)
        self.start()

    def run(self):
        while data := os.read(self.read_end, 64):  # b"" when close() has closed the write end
            if signal.SIGTERM in data:
                say_stop(Terminated("SIGTERM"))

    def close(self):
        current = signal.set_wakeup_fd(self.previous_fd)
        if current != self.write_end:  # another library's fd replaced ours since: it stays
            signal.set_wakeup_fd(current)
        os.close(self.write_end)
        self.join(timeout=5)
        os.close(self.read_end)
