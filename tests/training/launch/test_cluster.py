"""Joining a running Ray cluster: no local sizing, and the checks of the cluster's nodes (on `ray.nodes()` rows as Ray
gives them; a head from `ray start --head` is read and checked in tests/training/test_ray_cluster.py)."""

from training.launch.cluster import check_existing_cluster, cluster_address, cluster_problems, drop_local_sizing
from training.launch.config import compose_config, resolve_config
from training.launch.hardware import apply_cpu_backend, ray_cpu_demand


def node(address: str, cpus: float, gpus: float, alive: bool = True) -> dict:
    """One row as ray.nodes() returns it (the fields the check reads)."""
    return {"Alive": alive, "NodeManagerAddress": address, "Resources": {"CPU": cpus, "GPU": gpus}}


def cpu_config(*overrides: str):
    cfg = resolve_config(compose_config("quickstart", ["model=tiny", "trainer.device=cpu", *overrides]), gpu_count=1)
    apply_cpu_backend(cfg)
    return cfg


def test_the_address_comes_from_the_config_or_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cluster_address(cpu_config()) is None
    assert cluster_address(cpu_config("+ray_kwargs.ray_init.address=auto")) == "auto"
    assert cluster_address(cpu_config("+ray_kwargs.ray_init.address=local")) is None  # Ray's word for a new one
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert cluster_address(cpu_config()) == "10.0.0.1:6379"


def test_joining_drops_the_local_sizing_that_ray_init_refuses():
    cfg = cpu_config("trainer.nnodes=2", "trainer.n_gpus_per_node=1", "+ray_kwargs.ray_init.num_cpus=4")
    assert cfg.ray_kwargs.ray_init.num_gpus == 2  # apply_cpu_backend's slots, for a local cluster
    notes = drop_local_sizing(cfg)
    assert cfg.ray_kwargs.ray_init.num_cpus is None and cfg.ray_kwargs.ray_init.num_gpus is None
    assert len(notes) == 2 and "num_cpus=4 ignored" in notes[0]


def test_cluster_problems_name_what_the_cluster_lacks():
    cfg = cpu_config("trainer.nnodes=2", "trainer.n_gpus_per_node=1")
    demand = ray_cpu_demand(cfg)
    enough = [node("10.0.0.1", demand, 1), node("10.0.0.2", 8, 1)]
    assert cluster_problems(cfg, enough, demand) == []
    one_gpu_node = [node("10.0.0.1", demand, 1), node("10.0.0.2", 8, 0), node("10.0.0.3", 64, 1, alive=False)]
    [problem] = cluster_problems(cfg, one_gpu_node, demand)
    assert "trainer.nnodes=2" in problem and "has 1 (10.0.0.1: 1, 10.0.0.2: 0)" in problem
    assert "--num-gpus" in problem  # a CPU run's slots are logical
    [problem] = cluster_problems(cfg, [node("a", 2, 1), node("b", 2, 1)], demand)
    assert f"has 4 logical CPUs on 2 node(s) but verl's actors reserve {demand}" in problem

