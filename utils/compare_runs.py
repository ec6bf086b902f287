"""Are two training runs the same run? Compares what a run folder (`trainer.default_local_dir`) holds.

    python utils/compare_runs.py RUN_A RUN_B [--step N] [--training-only]

Compared, times, rates and memory apart: the generation dumps (`generations/train` and `generations/val`, rows
sorted, verl's random uids left out), the console's step records (`logs/progress.jsonl`, those both runs have: a
resumed run's file holds its last process's), every number verl logged (`logs/metrics.jsonl`, the steps both runs have),
every TensorBoard scalar,
and the actor's weights at the latest common checkpoint, bitwise. Exit 0 when all agree, 1 when any differs (each
difference is named). docs/reproducibility.md says what a CPU run repeats. `--training-only` leaves validation out
(its dumps, records, `val-*` numbers and scalars): a run that validates and one that does not train the same steps on
the CPU backend, each response seeded by its place in the run (training/trainer/seeding.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the project root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from utils.metrics_file import read_metrics  # noqa: E402

VOLATILE = ("time", "timing", "second", "memory", "perf", "throughput")  # a key containing any of these measures the machine, not the run
RANDOM_IDS = ("uid", "group")  # verl's uuid4 per prompt
VALIDATION = ("val-", "val_")  # verl's val-core/val-aux numbers; our step records' val_accuracy, val_sources


def _kept(key: str, training_only: bool = False) -> bool:
    return (key not in RANDOM_IDS and not any(word in key for word in VOLATILE)
            and not (training_only and key.startswith(VALIDATION)))


def dump_rows(path: Path) -> list[dict]:
    rows = [{k: v for k, v in json.loads(line).items() if _kept(k)} for line in path.read_text().splitlines()]
    return sorted(rows, key=lambda row: json.dumps(row, sort_keys=True))


def step_records(run: Path, training_only: bool = False) -> dict[int, dict]:
    records, path = {}, run / "logs" / "progress.jsonl"
    kinds = ("step",) if training_only else ("step", "validation")
    for line in (path.read_text().splitlines() if path.is_file() else []):
        row = json.loads(line)
        if row.get("kind") in kinds:
            records[(row["kind"], row["step"])] = {k: v for k, v in row.items() if _kept(k, training_only)}
    return records


def logged_numbers(run: Path, training_only: bool = False) -> dict[int, dict]:
    """{step: kept numbers} of the run's `logs/metrics.jsonl` (utils/metrics_file.py); steps left empty (the
    validation before training, with `training_only`) are left out."""
    numbers = {step: {k: v for k, v in data.items() if _kept(k, training_only)}
               for step, data in read_metrics(run / "logs").items()}
    return {step: kept for step, kept in numbers.items() if kept}


def scalars(run: Path, training_only: bool = False) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found = {}
    for folder in sorted({p.parent for p in (run / "tensorboard").rglob("events.*")}):
        events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            if _kept(tag, training_only):
                found[tag] = [(e.step, e.value) for e in events.Scalars(tag)]
    return found


def actor_weights_equal(a: Path, b: Path) -> tuple[bool, int]:
    import torch

    def load(path: Path) -> dict:
        state = torch.load(path, map_location="cpu", weights_only=False)
        return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v) for k, v in state.items()}

    first, second = load(a), load(b)
    same = first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)
    return same, len(first)


def latest_common_step(a: Path, b: Path) -> int | None:
    steps = [{int(p.name.split("_")[-1]) for p in run.glob("global_step_*")} for run in (a, b)]
    common = steps[0] & steps[1]
    return max(common) if common else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--step", type=int, help="checkpoint whose weights to compare (default: latest common)")
    parser.add_argument("--training-only", action="store_true",
                        help="leave validation out: its dumps, records, val-* numbers and scalars")
    args = parser.parse_args(argv)
    a, b, only = args.run_a, args.run_b, args.training_only
    differences = []
    for sub in ("generations/train",) if only else ("generations/train", "generations/val"):
        for path in sorted((a / sub).glob("*.jsonl")):
            other = b / sub / path.name
            if not other.is_file() or dump_rows(path) != dump_rows(other):
                differences.append(f"{sub}/{path.name}")
    records_a, records_b = step_records(a, only), step_records(b, only)
    common = sorted(records_a.keys() & records_b.keys())  # a resumed run's file holds its last process's records
    differences += [f"progress.jsonl {kind} {step}" for kind, step in common
                    if records_a[(kind, step)] != records_b[(kind, step)]]
    logged_a, logged_b = logged_numbers(a, only), logged_numbers(b, only)
    logged = sorted(logged_a.keys() & logged_b.keys())
    differences += [f"metrics.jsonl step {step}" for step in logged if logged_a[step] != logged_b[step]]
    scalars_a, scalars_b = scalars(a, only), scalars(b, only)
    differences += [f"tensorboard {tag}" for tag in sorted(scalars_a.keys() | scalars_b.keys())
                    if scalars_a.get(tag) != scalars_b.get(tag)]
    step = args.step if args.step is not None else latest_common_step(a, b)
    weights = "no common checkpoint"
    if step is not None:
        name = Path(f"global_step_{step}") / "actor" / "model_world_size_1_rank_0.pt"
        same, count = actor_weights_equal(a / name, b / name)
        weights = f"actor weights at step {step}: {'bitwise identical' if same else 'DIFFERENT'} ({count} tensors)"
        if not same:
            differences.append(f"actor weights at step {step}")
    print(f"dumps: {len(list((a / 'generations').rglob('*.jsonl')))} files; step records in both: {len(common)}; "
          f"logged steps in both: {len(logged)}; "
          f"tensorboard: {len(scalars_a)} tags, {sum(map(len, scalars_a.values()))} points; {weights}")
    if differences:
        print(f"the runs differ in {len(differences)} places: {', '.join(differences[:12])}")
        return 1
    print("the two runs are the same run (times, rates and memory apart" + (", validation left out)" if only else ")"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
