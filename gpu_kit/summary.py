"""The run's summary (OUT/summary.md: one row a stage) and what travels back from the device: at most 8 files, so
the records go as one results.json and the logs as one logs.tar.gz (each log's last LOG_KEEP bytes). Stdlib only."""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

SMALL_FILES = ("machine.json", "report.json", "junit.xml", "vllm_alone.json", "nvidia-smi.txt", "image-freeze.txt")


def headline(record: dict) -> str:
    """The few numbers of a stage worth a glance."""
    results = record.get("results") or {}
    if record.get("problems"):
        return "; ".join(p.splitlines()[0][:160] for p in record["problems"])
    if record.get("why"):
        return record["why"]
    if "models" in results:  # a_actor_bench: each model's attention paths, seconds a step
        return "; ".join(f"{name}: " + ", ".join(_path(path, r) for path, r in entry.get("attention", {}).items())
                         for name, entry in results["models"].items()) or "no model measured"
    if "steps" in results:
        parts = []
        for step, metrics in sorted(results["steps"].items(), key=lambda item: int(item[0])):
            bits = [f"{metrics['timing_s/step']:.1f} s" if "timing_s/step" in metrics else "",
                    f"gen {metrics['gen_tokens_per_s']:.0f} tok/s" if "gen_tokens_per_s" in metrics else "",
                    f"reward {metrics['env/reward']:.3f}" if "env/reward" in metrics else ""]
            parts.append(f"step {step}: {', '.join(b for b in bits if b)}")
        if results.get("launch_to_first_rollout_s") is not None:
            parts.append(f"launch -> first rollout {results['launch_to_first_rollout_s']} s")
        if results.get("startup"):
            parts.append(startup_line(results["startup"]))
        parts.append(f"checkpoint {results.get('checkpoint_step')}")
        return "; ".join(parts)
    if "tests" in results:
        return ", ".join(f"{results[k]} {k}" for k in ("tests", "failures", "errors", "skipped"))
    if "evaluations" in results:
        return "; ".join(_evaluation(name, found) for name, found in results["evaluations"].items()) \
            or "no results.json written"
    if "tokens_per_s" in results:
        return f"{results['tokens_per_s']} tok/s over batches {results.get('timed_batches')}"
    for tier in ("core", "kernels"):
        if tier in results:  # an install stage's report
            done = results[tier]
            return (f"{done['packages']} packages in {done['seconds']} s; torch {done['torch']['version']} is the "
                    f"image's; pip check: {len(done['pip_check'])} problems, {len(done['pip_check_other_tiers'])} "
                    "on tiers not installed")
    if "imports" in results:
        return ", ".join(f"{module} {took[:60]}" for module, took in results["imports"].items())
    if "torch" in results:
        torch, machine = results["torch"], results.get("machine", {})
        gpu = machine.get("nvidia_smi", "").splitlines()[0] if machine.get("nvidia_smi") else ""
        return f"torch {torch.get('version')} cuda {torch.get('cuda_available')}; {gpu}".strip("; ")
    return ", ".join(f"{k} {v}" for k, v in list(results.items())[:3] if not isinstance(v, (dict, list)))


STARTUP_MARKS = ("Ray started", "worker up: WorkerDict", "workers ready", "init engine", "first rollout done")


def startup_line(events: list[dict]) -> str:
    """`start-up: Ray started 9.8 s, ...`: a few marks of a run's start-up breakdown (seconds since launch; the whole
    list is in results.json). `init engine`: vLLM's engine ready (its line names what the engine's start took)."""
    marks = []
    for mark in STARTUP_MARKS:  # the first event of each (two GPUs start two WorkerDicts)
        first = next((event for event in events if event["what"].startswith(mark)
                      or (event["what"].startswith("vLLM ") and f": {mark}" in event["what"])), None)
        if first is not None:
            marks.append(f"{mark} {first['seconds']} s")
    return "start-up: " + ", ".join(marks)


def _path(path: str, result: dict) -> str:
    if result.get("status") != "ok":
        return f"{path} {result.get('status')}"
    mfu = f" MFU {result['mfu']:.0%}" if result.get("mfu") is not None else ""
    return f"{path} {result.get('median_s')} s{mfu}"


def _evaluation(name: str, found) -> str:
    """One evaluator mode's overall accuracy, interval and speed, e.g. `greedy: overall 0.283 [0.249, 0.318], ...`."""
    if not isinstance(found, dict) or found.get("accuracy") is None:
        return f"{name}: {found}"
    interval = ", ".join(f"{x:.3f}" for x in found.get("accuracy_ci95") or [])
    return (f"{name.split('/')[0]}: overall {found['accuracy']:.3f} [{interval}], {found['samples']} samples, "
            f"{found['samples_per_s']} samples/s")


def write_summary(runner) -> Path:
    rows = ["| stage | status | seconds | what it says |", "| --- | --- | --- | --- |"]
    for stage in runner.stages:
        record = runner.record(stage.id)
        if record is None:
            rows.append(f"| {stage.id} | not run | | {stage.title} |")
            continue
        seconds = f"{record['seconds']:.0f}" if record.get("seconds") is not None else ""
        rows.append(f"| {stage.id} | {record['status']} | {seconds} | {headline(record).replace('|', '/')} |")
    path = runner.out / "summary.md"
    path.write_text("\n".join(rows) + "\n")
    return path


def export(out: Path, dest: Path, keep: int) -> list[Path]:
    """Copies summary.md, results.json (every stage record), image-freeze.txt and logs.tar.gz (each stage's log
    end and small result files) into `dest`: at most 4 files."""
    dest.mkdir(parents=True, exist_ok=True)
    records = {p.stem: json.loads(p.read_text()) for p in sorted((out / "stages").glob("*.json"))}
    (dest / "results.json").write_text(json.dumps(records, indent=1) + "\n")
    written = [dest / "results.json"]
    for name in ("summary.md", "a_machine/image-freeze.txt"):
        if (out / name).is_file():
            written.append(Path(shutil.copy(out / name, dest / Path(name).name)))
    with tarfile.open(dest / "logs.tar.gz", "w:gz") as tar:
        for folder in sorted(p for p in out.iterdir() if p.is_dir() and p.name not in ("stages", "runs")):
            for path in sorted(folder.iterdir()):
                if path.name == "log.txt" or path.name in SMALL_FILES:
                    data = path.read_bytes()[-keep:]
                    info = tarfile.TarInfo(f"{folder.name}/{path.name}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    written.append(dest / "logs.tar.gz")
    return written
