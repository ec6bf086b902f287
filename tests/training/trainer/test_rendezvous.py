"""The training ranks' rendezvous port (training/trainer/rendezvous.py): chosen outside the ephemeral range, given to
verl's own worker-group argument. The launch with that port taken is in tests/training/launch/test_console.py."""

import inspect
import random
import socket

import pytest

from training.trainer.rendezvous import RAY_MAX_WORKER_PORT, WINDOW, choose_port_range, ephemeral_low, rendezvous_ports


def test_the_default_window_lies_between_rays_worker_ports_and_the_ephemeral_range():
    low = ephemeral_low()
    for seed in range(50):
        first, end = choose_port_range(None, random.Random(seed))
        assert RAY_MAX_WORKER_PORT < first and end <= low and end - first == WINDOW
    assert len({tuple(choose_port_range(None, random.Random(s))) for s in range(50)}) > 40  # runs stay apart


def test_a_configured_range_is_used_and_a_wrong_one_is_refused():
    assert choose_port_range([25000, 25010]) == [25000, 25010]
    with pytest.raises(ValueError, match=r"env.rendezvous_ports=\[25010, 25000\]"):
        choose_port_range([25010, 25000])


def test_ephemeral_low_reads_the_kernels_range(tmp_path):
    path = tmp_path / "range"
    path.write_text("40000\t60999\n")
    assert ephemeral_low(str(path)) == 40000
    assert ephemeral_low(str(tmp_path / "missing")) == 32768


def test_verls_port_scan_skips_a_taken_port():
    """verl's get_master_addr_port, given our range, steps over a port another process holds (run as a plain
    function: the body Ray would run)."""
    import verl.single_controller.ray.base as base

    with socket.socket() as squatter:
        squatter.bind(("", 0))
        taken = squatter.getsockname()[1]
        squatter.listen()
        addr, port = base.get_master_addr_port._function(master_port_range=[taken, taken + 5])
    assert int(port) != taken and taken < int(port) < taken + 5


def test_contract_verls_trainer_builds_its_worker_groups_through_the_module_name_we_bind():
    """rendezvous_ports rebinds verl.trainer.ppo.v1.trainer_base.RayWorkerGroup during init(); if verl stops
    looking the class up there, or drops master_port_range, this fails."""
    import verl.trainer.ppo.v1.trainer_base as trainer_base
    from verl.single_controller.ray.base import RayWorkerGroup, get_master_addr_port

    assert trainer_base.RayWorkerGroup is RayWorkerGroup
    assert "RayWorkerGroup(" in inspect.getsource(trainer_base.PPOTrainer._setup)
    assert "self._setup()" in inspect.getsource(trainer_base.PPOTrainer.init)
    assert 'kwargs.pop("master_port_range", None)' in inspect.getsource(RayWorkerGroup.__init__)
    assert "master_port_range" in inspect.signature(get_master_addr_port._function).parameters
    with rendezvous_ports([25000, 25010]):
        bound = trainer_base.RayWorkerGroup
        assert bound is not RayWorkerGroup and issubclass(bound, RayWorkerGroup)
    assert trainer_base.RayWorkerGroup is RayWorkerGroup
