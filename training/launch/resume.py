"""What a launch will do with its checkpoint folder, decided in the driver before Ray starts.

verl resumes without a word: a finished experiment (latest checkpoint at trainer.total_training_steps) starts Ray,
loads the model, trains 0 steps and exits 0, and a resume with another env.mix, model or env.seed continues the old
weights with the new settings. So, before Ray starts, `check_resume` finds the checkpoint verl would load (the same
rules as verl's `_load_checkpoint`) and compares it with `run_manifest.json`, which each launch writes into
trainer.default_local_dir: a finished experiment stops here with exit 0 and says how to continue; a checkpoint of
another mix, model or seed is refused (ConfigProblem, exit 2), and so is a step that lacks a file verl loads (a shard
of a rank, data.pt), with the command that resumes from the last complete step; otherwise one line says "resuming" or
"starting fresh".
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

from omegaconf import DictConfig

from training.launch.checks import ConfigProblem, raise_if_problems

MANIFEST = "run_manifest.json"
TRACKER = "latest_checkpointed_iteration.txt"  # verl.utils.checkpoint.checkpoint_manager: the tracker file
STEP_PREFIX = "global_step_"
COMPARED = ("env.mix", "env.seed", "actor_rollout_ref.model.path")  # what a resume must keep (env.mix by fingerprint)
FRESH = "trainer.resume_mode=disable or a new trainer.experiment_name"
# verl's FSDPCheckpointManager: what each item of checkpoint.load_contents loads, as <prefix>_world_size_W_rank_R.pt
SHARDS = {"model": "model", "optimizer": "optim", "extra": "extra_state"}


class AlreadyFinished(Exception):
    """The checkpoint verl would resume from is at or past trainer.total_training_steps: there is nothing to train."""


def _absolute(path: str) -> Path:
    """verl joins a relative checkpoint path with the working directory of its process (the driver's here)."""
    return Path(path) if os.path.isabs(path) else Path(os.getcwd()) / path


def resume_point(cfg: DictConfig) -> tuple[Path | None, int]:
    """Returns (global_step_N folder, N) that verl's `_load_checkpoint` would load, or (None, 0) for a fresh start.

    Mirrors verl 0.9.1 (trainer_base._load_checkpoint and find_latest_ckpt_path): `disable` starts fresh; `auto` reads
    the step in <default_local_dir>/latest_checkpointed_iteration.txt and starts fresh when that file or its folder is
    missing; `resume_path` takes the step from trainer.resume_from_path. What verl would crash on (a garbled tracker,
    a step that lacks a file verl loads) is a ConfigProblem."""
    mode, trainer = str(cfg.trainer.resume_mode), cfg.trainer
    if mode == "disable":
        return None, 0
    if mode == "auto":
        if trainer.get("default_local_dir") is None:
            return None, 0
        tracker = _absolute(str(trainer.default_local_dir)) / TRACKER
        if not tracker.is_file():
            return None, 0
        text = tracker.read_text()
        try:
            step = int(text)
        except ValueError:
            raise ConfigProblem(f"{tracker} holds {text[:40]!r}, not a step number; write the step of the last "
                                f"complete global_step_N folder there, or start fresh ({FRESH})") from None
        folder = tracker.parent / f"{STEP_PREFIX}{step}"
        if not folder.exists():
            return None, 0
        refuse_if_damaged(folder, cfg, f"{tracker} names step {step}")
        return folder, step
    if mode == "resume_path":
        path = trainer.get("resume_from_path")
        if not isinstance(path, str) or STEP_PREFIX not in path:
            raise ConfigProblem(f"trainer.resume_mode=resume_path needs trainer.resume_from_path=<...>/global_step_N, "
                                f"got {path!r}")
        folder = _absolute(path)
        step_text = path.split(STEP_PREFIX)[-1]
        if not step_text.strip().isdigit():
            raise ConfigProblem(f"trainer.resume_from_path={path}: must end in global_step_N (no trailing '/')")
        step = int(step_text)
        if not folder.is_dir():
            raise ConfigProblem(f"trainer.resume_from_path={path}: no such folder; point it at a global_step_N folder")
        refuse_if_damaged(folder, cfg, f"trainer.resume_from_path={path}")
        return folder, step
    raise ConfigProblem(f"trainer.resume_mode={mode}: use auto, disable or resume_path")


def is_complete(folder: Path) -> bool:
    """True when verl finished writing `folder`: it writes actor/ first, then data.pt, then the tracker file."""
    return (folder / "data.pt").is_file() and (folder / "actor").is_dir()


def checkpoint_world_size(actor: Path) -> int | None:
    """The number of ranks that saved `actor` (a global_step_N/actor folder): fsdp_config.json's world_size, which
    verl's rank 0 writes on every save, else the largest W of the model_world_size_W_rank_R.pt shards there."""
    try:
        return int(json.loads((actor / "fsdp_config.json").read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        sizes = [part.split("_rank_")[0] for part in (p.name[len("model_world_size_"):]
                                                      for p in actor.glob("model_world_size_*_rank_*.pt"))]
        return max((int(size) for size in sizes if size.isdigit()), default=None)


def missing_files(folder: Path, contents: list[str]) -> list[str]:
    """Returns the files (relative to `folder`, a global_step_N) that verl's load would open and cannot: data.pt, and
    per rank of the checkpoint's world size the shards of `contents` (actor.checkpoint.load_contents: model,
    optimizer, extra), as verl's FSDPCheckpointManager names them."""
    missing = [] if (folder / "data.pt").is_file() else ["data.pt"]
    actor = folder / "actor"
    world_size = checkpoint_world_size(actor) if actor.is_dir() else None
    if world_size is None:
        return missing + ["actor/fsdp_config.json (and every model_world_size_W_rank_R.pt shard)"]
    for rank in range(world_size):
        missing += [f"actor/{SHARDS[item]}_world_size_{world_size}_rank_{rank}.pt" for item in contents
                    if item in SHARDS
                    and not (actor / f"{SHARDS[item]}_world_size_{world_size}_rank_{rank}.pt").is_file()]
    return missing


def load_contents(cfg: DictConfig) -> list[str]:
    """What verl's actor loads from a checkpoint (actor_rollout_ref.actor.checkpoint.load_contents)."""
    checkpoint = cfg.actor_rollout_ref.actor.get("checkpoint") or {}
    return list(checkpoint.get("load_contents") or ["model", "optimizer", "extra"])


def last_complete_step(directory: Path, before: int, contents: list[str]) -> Path | None:
    """The global_step_N folder of `directory` with the highest N < `before` that has every file verl loads."""
    steps = sorted((int(p.name[len(STEP_PREFIX):]), p) for p in directory.glob(f"{STEP_PREFIX}*")
                   if p.name[len(STEP_PREFIX):].isdigit() and int(p.name[len(STEP_PREFIX):]) < before)
    return next((folder for _, folder in reversed(steps) if not missing_files(folder, contents)), None)


def command_with(*overrides: str) -> str:
    """This launch's command line (`python` and sys.argv) with `overrides` in place of its trainer.resume_* ones."""
    replaced = {override.split("=", 1)[0] for override in overrides}
    kept = [arg for arg in sys.argv if arg.split("=", 1)[0].lstrip("+") not in replaced]
    return " ".join(shlex.quote(part) for part in ["python", *kept, *overrides])


def refuse_if_damaged(folder: Path, cfg: DictConfig, chosen_by: str) -> None:
    """Raises ConfigProblem naming the files `folder` lacks (a partial copy, a disk fault, a cut write): verl would
    start Ray and fail inside a worker on the first of them. The message gives the command that resumes from the
    last complete step (or starts fresh), and leaves the damaged step alone, so that a copy can still be finished."""
    contents = load_contents(cfg)
    missing = missing_files(folder, contents)
    if not missing:
        return
    step = int(folder.name[len(STEP_PREFIX):])
    earlier = last_complete_step(folder.parent, step, contents)
    fix = (f"resume from the last complete step, {earlier.name}: "
           f"{command_with('trainer.resume_mode=resume_path', f'trainer.resume_from_path={earlier}')}"
           if earlier is not None else f"no earlier step is complete; start fresh with {FRESH}")
    raise ConfigProblem(f"{chosen_by}, but {folder} is damaged (a partial copy, a disk fault or a cut save): "
                        f"{len(missing)} file(s) verl loads are missing: {', '.join(missing[:6])}"
                        f"{', ...' if len(missing) > 6 else ''}. Restore them to resume from step {step}, or {fix}")


def incomplete_steps(directory: Path, resumed_step: int) -> list[str]:
    """Names the global_step_N folders of `directory` that no finished save stands behind: past the step resumed
    from (a write cut by a kill or a full disk; verl moves the tracker only after a complete save) or incomplete."""
    if not directory.is_dir():
        return []
    names = []
    for folder in sorted(directory.glob(f"{STEP_PREFIX}*")):
        step = folder.name[len(STEP_PREFIX):]
        if step.isdigit() and (int(step) > resumed_step or not is_complete(folder)):
            names.append(folder.name)
    return names


def run_manifest(cfg: DictConfig, start_step: int) -> dict:
    """Returns what this launch records: the values a resume must keep, and the steps it was asked for."""
    from envs.mix import load_mix, mix_path
    from envs.stream import mix_fingerprint

    return {"env.mix": str(cfg.env.mix), "mix_fingerprint": mix_fingerprint(load_mix(mix_path(cfg.env.mix))),
            "env.seed": int(cfg.env.seed), "actor_rollout_ref.model.path": str(cfg.actor_rollout_ref.model.path),
            "trainer.total_training_steps": cfg.trainer.get("total_training_steps"), "start_step": start_step,
            "written_at": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}


def write_manifest(directory: Path, manifest: dict) -> Path:
    """Writes `manifest` to directory/run_manifest.json atomically (a crash leaves the old file or the new one)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{MANIFEST}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(manifest, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, directory / MANIFEST)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return directory / MANIFEST


def read_manifest(directory: Path) -> dict | None:
    """Returns the manifest in `directory`, or None when there is none (checkpoints written before manifests)."""
    path = directory / MANIFEST
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise ConfigProblem(f"{path} is not valid JSON ({err}); delete it to resume without the check") from err


def manifest_problems(saved: dict, now: dict, folder: Path) -> list[str]:
    """Returns one problem per value that differs between the checkpoint's manifest and this launch."""
    differs = []
    for key in COMPARED:
        old, new = saved.get(key), now[key]
        if key == "env.mix":
            if saved.get("mix_fingerprint") in (None, now["mix_fingerprint"]):
                continue  # the same tasks, weights, configs and levels, under whatever name
            changed = ", the mix file changed since" if old == new else ""
            old = f"{old} (fingerprint {saved['mix_fingerprint'][:12]})"
            new = f"{new} (fingerprint {now['mix_fingerprint'][:12]}{changed})"
        elif old is None or old == new:
            continue
        differs.append(f"{key}: checkpoint {old}, now {new}")
    if not differs:
        return []
    return [f"{folder} was trained with other settings; resuming would continue its weights and stream with the new "
            f"ones. {'; '.join(differs)}. Fix: set the checkpoint's values again to resume, or start fresh with "
            f"{FRESH}, or delete {folder.parent}"]


def check_resume(cfg: DictConfig, launching: bool = True) -> str:
    """Says what this launch does with its checkpoint folder, before Ray starts; returns (and prints) that line.

    Raises ConfigProblem when the checkpoint was trained with another env.mix, model or env.seed, and AlreadyFinished
    when it is at or past trainer.total_training_steps (not with trainer.val_only, which validates that checkpoint).
    `launching=False` (preflight) only reports: no manifest is written and a finished experiment is a note."""
    directory = None if cfg.trainer.get("default_local_dir") is None else _absolute(str(cfg.trainer.default_local_dir))
    folder, step = resume_point(cfg)
    now = run_manifest(cfg, step)
    if folder is not None:
        saved = read_manifest(folder.parent)
        raise_if_problems(manifest_problems(saved or {}, now, folder), "resume check")
    total = cfg.trainer.get("total_training_steps")
    if folder is None:
        line = f"starting fresh in {directory}"
        if str(cfg.trainer.resume_mode) == "disable" and directory is not None and (directory / TRACKER).is_file():
            line += " (trainer.resume_mode=disable: the checkpoints already there are overwritten as this run saves)"
    elif total is not None and step >= int(total) and not cfg.trainer.get("val_only", False):
        line = (f"experiment {folder.parent} already finished at step {step} (trainer.total_training_steps={total}); "
                f"nothing to train. To continue it, raise trainer.total_training_steps; to start fresh, use {FRESH}")
        if launching:
            raise AlreadyFinished(line)
    else:
        line = f"resuming {folder.parent} from step {step} of {total}"
        if saved is None:
            line += f" (no {MANIFEST} there: env.mix, env.seed and the model were not checked against it)"
    partial = incomplete_steps(directory, step) if directory is not None and folder is not None else []
    if partial:
        line += (f"; {', '.join(partial)} past it or incomplete (an interrupted write) will not be resumed from and is "
                 "overwritten when this run saves that step")
    print(f"[resume] {line}")
    if launching and directory is not None:
        write_manifest(directory, now)
    return line
