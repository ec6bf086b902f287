"""Settings that make a launch start quickly and say nothing wrong about the machine it runs on.

Kept apart from training/launch/hardware.py (device choice and Ray sizing): each function sets one thing, only when the
config or the environment does not set it already.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, open_dict

TQ_DEFAULT_THREADS = 8  # TransferQueue's TQ_NUM_THREADS default (client and storage units)


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def runtime_env_vars(cfg: DictConfig, values: dict[str, str]) -> None:
    """Adds `values` to ray_init.runtime_env.env_vars (what every Ray worker gets), keeping values already there
    and variables set in the launching shell (the user's choice)."""
    with open_dict(cfg):
        ray_init = cfg.ray_kwargs.ray_init
        ray_init.setdefault("runtime_env", {})
        env_vars = dict(ray_init.runtime_env.get("env_vars") or {})
        for key, value in values.items():
            if key not in env_vars and key not in os.environ:
                env_vars[key] = value
        ray_init.runtime_env.env_vars = env_vars


def transfer_queue_threads(cfg: DictConfig) -> None:
    """TransferQueue asks torch for 8 threads on every put and get and, on a machine with fewer physical cores,
    warns and takes them all, once per call (a hundred warnings a run on 2 cores): ask for what there is."""
    cores = physical_cores()
    if cores < TQ_DEFAULT_THREADS:
        runtime_env_vars(cfg, {"TQ_NUM_THREADS": str(cores)})


def no_dashboard_on_cpu(cfg: DictConfig) -> None:
    """A CPU run starts Ray without its dashboard (a dozen processes, seconds of start-up, memory) unless the
    config asks for it (+ray_kwargs.ray_init.include_dashboard=true). An existing cluster (address, RAY_ADDRESS) keeps
    its own."""
    from training.launch.cluster import cluster_address

    if cfg.trainer.device == "cpu" and not cluster_address(cfg):
        with open_dict(cfg):
            if cfg.ray_kwargs.ray_init.get("include_dashboard") is None:
                cfg.ray_kwargs.ray_init.include_dashboard = False


def apply_startup_settings(cfg: DictConfig) -> None:
    """Applies each of the settings above (they read and set ray_kwargs.ray_init only)."""
    transfer_queue_threads(cfg)
    no_dashboard_on_cpu(cfg)
