"""Joining a Ray cluster that is already running (`RAY_ADDRESS` or `ray_kwargs.ray_init.address`).

`ray.init` refuses num_cpus / num_gpus when it connects to a cluster ("When connecting to an existing cluster, num_cpus
and num_gpus must not be provided"): those size a local cluster, and a running one has its own resources. So a launch
that joins one drops the local sizing, and the checks compare what verl's actors will reserve (logical CPUs, one GPU
slot per training rank, `trainer.nnodes` nodes with `trainer.n_gpus_per_node` each) with what the cluster offers.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from omegaconf import DictConfig, open_dict


def cluster_address(cfg: DictConfig) -> str | None:
    """Returns the address of the cluster this run joins (ray_kwargs.ray_init.address, else $RAY_ADDRESS), or None
    when it starts its own local cluster (no address, or Ray's `local`)."""
    address = cfg.ray_kwargs.ray_init.get("address") or os.environ.get("RAY_ADDRESS")
    return str(address) if address and str(address) != "local" else None


def drop_local_sizing(cfg: DictConfig) -> list[str]:
    """Unsets ray_kwargs.ray_init.num_cpus and num_gpus (Ray refuses them when joining); returns a note for each
    value the config had set, so that a user sees it was ignored."""
    ray_init, notes = cfg.ray_kwargs.ray_init, []
    with open_dict(cfg):
        for key in ("num_cpus", "num_gpus"):
            if ray_init.get(key) is not None:
                notes.append(f"ray_kwargs.ray_init.{key}={ray_init[key]} ignored: the cluster has its own resources")
            ray_init[key] = None
    return notes


def cluster_problems(cfg: DictConfig, nodes: list[dict], cpu_demand: int) -> list[str]:
    """Returns what the cluster's alive nodes (`ray.nodes()` rows) lack for this run: logical CPUs for verl's actors
    (`cpu_demand`), `trainer.nnodes` nodes with `trainer.n_gpus_per_node` GPU slots each. Reads trainer.nnodes,
    trainer.n_gpus_per_node, trainer.device."""
    alive = [node for node in nodes if node.get("Alive")]
    per_node, wanted_nodes = int(cfg.trainer.n_gpus_per_node), int(cfg.trainer.nnodes)
    cpus = sum(node["Resources"].get("CPU", 0) for node in alive)
    gpu_nodes = [node for node in alive if node["Resources"].get("GPU", 0) >= per_node]
    slot = "logical GPU slots (`ray start ... --num-gpus=N` on a CPU node)" if cfg.trainer.device == "cpu" else "GPUs"
    problems = []
    if cpus < cpu_demand:
        problems.append(f"the Ray cluster has {cpus:g} logical CPUs on {len(alive)} node(s) but verl's actors reserve "
                        f"{cpu_demand} (task runner, TransferQueue, agent-loop and reward workers, 3 per device); "
                        f"start the nodes with more (`ray start ... --num-cpus=N`) or fewer workers; Ray would wait "
                        "forever")
    if len(gpu_nodes) < wanted_nodes:
        have = ", ".join(f"{n.get('NodeManagerAddress', '?')}: {n['Resources'].get('GPU', 0):g}" for n in alive)
        problems.append(f"trainer.nnodes={wanted_nodes} x trainer.n_gpus_per_node={per_node} needs {wanted_nodes} "
                        f"node(s) with {per_node} {slot} each; the cluster has {len(gpu_nodes)} ({have}). Set "
                        "trainer.nnodes / trainer.n_gpus_per_node to what the cluster has, or add nodes")
    return problems


def reachable_or_raise(address: str, timeout_s: float = 5.0) -> None:
    """Raises ConnectionError when HOST:PORT does not accept a TCP connection within `timeout_s`: ray.init would
    retry a dead address for minutes. Addresses without a port (`auto`, `ray://...` is left to Ray) are not probed."""
    import socket

    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as err:
        raise ConnectionError(f"no Ray cluster answers at {address} ({err}); start one with `ray start --head` (and "
                              "`ray start --address=HEAD:6379` on the other nodes), or unset RAY_ADDRESS / "
                              "ray_kwargs.ray_init.address to start a local cluster") from err


def read_cluster_nodes(address: str) -> list[dict]:
    """Connects to the cluster at `address`, returns `ray.nodes()` and disconnects (verl connects again at launch).
    Raises ConnectionError naming the address when no cluster answers."""
    import ray

    reachable_or_raise(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, include_dashboard=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConnectionError(f"no Ray cluster answers at {address} ({type(err).__name__}: {err}); start one with "
                              "`ray start --head` (and `ray start --address=HEAD:6379` on the other nodes), or unset "
                              "RAY_ADDRESS / ray_kwargs.ray_init.address to start a local cluster") from err
    try:
        return ray.nodes()
    finally:
        ray.shutdown()


def check_existing_cluster(cfg: DictConfig, cpu_demand: int,
                           read_nodes: Callable[[str], list[dict]] = read_cluster_nodes) -> list[str]:
    """For a run that joins a cluster: drops the local sizing, prints what it joins, returns the cluster's problems
    (or that none answers). Returns [] for a run that starts its own cluster."""
    address = cluster_address(cfg)
    if address is None:
        return []
    for note in drop_local_sizing(cfg):
        print(f"[check] {note}")
    try:
        nodes = read_nodes(address)
    except ConnectionError as err:
        return [str(err)]
    alive = [node for node in nodes if node.get("Alive")]
    print(f"[check] joining the Ray cluster at {address}: {len(alive)} node(s), "
          f"{sum(n['Resources'].get('CPU', 0) for n in alive):g} CPUs, "
          f"{sum(n['Resources'].get('GPU', 0) for n in alive):g} GPU slots")
    return cluster_problems(cfg, nodes, cpu_demand)
