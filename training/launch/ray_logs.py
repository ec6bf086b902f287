"""Ray's session logs of a run: where they are, linked under the run's logs while it lives, copied when it ends.

Ray writes each worker's output to `worker-<id>-<job>-<pid>.{out,err}` in its session folder (/tmp/ray/session_*/logs);
the run keeps them as `<logs>/workers/<actor>-<pid>.{out,err}` (training/launch/console.py at the end of the run,
training/launch/guardian.py again once Ray has stopped, when it also deletes the session folder).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def ray_logs_dir() -> Path | None:
    """Ray's session log folder of this driver (private API, read only; None when it cannot be found)."""
    try:
        import ray._private.worker as ray_worker

        return Path(ray_worker._global_node.get_logs_dir_path())
    except Exception:  # noqa: BLE001 - a missing link must never stop a run
        return None


def actor_of(path: Path) -> str:
    """The actor or task name Ray writes at the top of a worker's log (`:actor_name:X`), else 'worker'."""
    try:
        with open(path, errors="replace") as log:
            for _, line in zip(range(5), log):
                if line.startswith((":actor_name:", ":task_name:")):
                    return line.split(":", 2)[2].strip() or "worker"
    except OSError:
        pass
    return "worker"


def collect_worker_logs(ray_logs: Path | None, logs: Path) -> dict[int, Path]:
    """Copies this session's worker logs to `<logs>/workers/<actor>-<pid>.{out,err}`; returns {pid: .err path}."""
    copied: dict[int, Path] = {}
    if ray_logs is None or not ray_logs.is_dir():
        return copied
    target = logs / "workers"
    sources = [p for p in sorted(ray_logs.glob("worker-*")) if p.suffix in (".out", ".err") and p.stat().st_size]
    names: dict[int, str] = {}  # Ray marks the actor's name in one of its two files
    for source in sources:
        name = actor_of(source)
        if name != "worker":
            names[int(source.stem.rsplit("-", 1)[-1])] = name
    try:
        target.mkdir(parents=True, exist_ok=True)
        for source in sources:
            pid = int(source.stem.rsplit("-", 1)[-1])
            dest = target / f"{names.get(pid, 'worker')}-{pid}{source.suffix}"
            shutil.copyfile(source, dest)
            if source.suffix == ".err" or pid not in copied:
                copied[pid] = dest
    except OSError as err:  # a full disk (often the run's own fault): the logs stay where Ray wrote them
        print(f"[logs] could not copy the worker logs to {target} ({err.strerror}); they stay in {ray_logs}",
              file=sys.stderr)
        return {int(p.stem.rsplit("-", 1)[-1]): p for p in sources if p.suffix == ".err"}
    link = logs / "ray"
    if link.is_symlink():
        link.unlink()
    try:  # Ray's log of each worker process: when it started and when its actor was ready (training/report/startup.py
        # reads them as training ends; the guardian copies the rest of Ray's logs here once Ray has stopped)
        link.mkdir(exist_ok=True)
        for source in ray_logs.glob("python-core-worker-*.log"):
            shutil.copyfile(source, link / source.name)
    except OSError:
        pass
    return copied


def shutdown_ray() -> None:
    """Stops this driver's Ray (its actors and, when the driver started it, the local cluster)."""
    import ray

    if ray.is_initialized():
        try:
            ray.shutdown()
        except Exception:  # noqa: BLE001 - the guardian kills whatever a failed shutdown leaves
            pass


def link_ray_logs(logs: Path) -> Path | None:
    """While the run lives, `<logs>/ray` points at Ray's session log folder; returns that folder (None before Ray
    has started)."""
    source = ray_logs_dir()
    link = logs / "ray"
    if source is None:
        return None
    try:
        if link.is_symlink():
            link.unlink()
        link.symlink_to(source, target_is_directory=True)
    except OSError:
        pass
    return source
