"""The training worker group's rendezvous port, chosen where no other process takes it by chance.

verl gives the training ranks their MASTER_PORT from `get_master_addr_port` (verl/single_controller/ray/base.py):
without a `master_port_range` it binds port 0, reads the port the kernel gave and releases it; rank 0 binds it again
seconds later, when its process group starts. Port 0 draws from the ephemeral range, the one every outgoing
connection (Ray's own among them) draws from too, so now and then that port is taken in between and the launch dies
with EADDRINUSE in `WorkerDict.__init__`. verl's own argument `master_port_range` makes it scan a range instead,
skipping ports in use; a range below the ephemeral one and above Ray's worker ports is taken only by a process that
asks for that port by number. A random window inside it keeps two runs on one machine apart.

verl's trainer builds its worker group without a way to pass that argument, so `rendezvous_ports` binds verl's name
`RayWorkerGroup` in `verl.trainer.ppo.v1.trainer_base` to a subclass that supplies it, only while our trainer's
`init()` runs (pinned by a contract test in tests/training/trainer/test_rendezvous.py).
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from pathlib import Path

RAY_MAX_WORKER_PORT = 19999  # Ray's default max_worker_port: its workers listen at or below it
WINDOW = 200


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """Returns the first port of the kernel's ephemeral range (Linux's default 32768 where it cannot be read)."""
    try:
        return int(Path(path).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def choose_port_range(setting=None, rng: random.Random | None = None) -> list[int] | None:
    """Returns [first, end) ports for the rendezvous: `setting` (env.rendezvous_ports, [first, end]) when given,
    else a random window of WINDOW ports between Ray's worker ports and the ephemeral range; None when the
    machine's ephemeral range leaves no room (verl's own choice then)."""
    if setting:
        first, end = (int(p) for p in setting)
        if not 0 < first < end <= 65536:
            raise ValueError(f"env.rendezvous_ports={list(setting)}: give [first, end) with 0 < first < end <= 65536")
        return [first, end]
    low, high = RAY_MAX_WORKER_PORT + 1, ephemeral_low() - WINDOW
    if high <= low:
        return None
    first = (rng or random.SystemRandom()).randrange(low, high)
    return [first, first + WINDOW]


@contextmanager
def rendezvous_ports(port_range: list[int] | None):
    """While active, verl's trainer builds its training worker groups with `master_port_range=port_range`."""
    import verl.trainer.ppo.v1.trainer_base as trainer_base

    original = trainer_base.RayWorkerGroup
    if port_range is None:
        yield
        return

    class PortRangeWorkerGroup(original):
        """verl's RayWorkerGroup with our port range unless the caller gives one."""

        def __init__(self, *args, **kwargs):
            if kwargs.get("master_port") is None:
                kwargs.setdefault("master_port_range", list(port_range))
            super().__init__(*args, **kwargs)

    trainer_base.RayWorkerGroup = PortRangeWorkerGroup
    try:
        yield
    finally:
        trainer_base.RayWorkerGroup = original
