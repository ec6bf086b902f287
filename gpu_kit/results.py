"""What each stage's output says, read from its log and files into a small dict (the stage record's `results`).
Each function returns a collector `(stage dir, log, marks) -> dict`; paths are relative to the runner's output
folder (the stage dir's parent). Stdlib only."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

STEP_LINE = re.compile(r"\bstep:(\d+) - ")
KEPT = re.compile(r"^(timing_s/|perf/|response_length/(mean|clip_ratio)|"
                  r"env/(reward|accuracy|samples|zero_variance_groups)$|"
                  r"training/rollout_probs_diff_mean|training/rollout_actor_probs_pearson_corr|actor/(grad_norm|"
                  r"ppo_kl|pg_loss|entropy)$|val-core/|async/|training/off_policy/trajectory_staleness_worst/max)")


def step_metrics(log: Path) -> dict[int, dict[str, float]]:
    """verl's console lines `step:N - key:value - ...` -> {N: {key: value}} (the last line of each step; numbers
    only, np.float64(x) unwrapped)."""
    steps: dict[int, dict[str, float]] = {}
    for line in log.read_text(errors="replace").splitlines():
        match = STEP_LINE.search(line)
        if not match:
            continue
        metrics = {}
        for part in line[match.end():].split(" - "):
            key, _, value = part.rpartition(":")
            number = re.sub(r"^np\.\w+\((.*)\)$", r"\1", value.strip())
            try:
                metrics[key.strip()] = float(number)
            except ValueError:
                pass
        steps[int(match[1])] = metrics
    return steps


def logged_metrics(run_dir: Path) -> dict[int, dict[str, float]]:
    """{step: every number verl logged} from the run's `ckpt/logs/metrics.jsonl` (utils/metrics_file.py's format, read
    here with the stdlib: the kit imports nothing of the project's), the last record of each step; {} when the run
    wrote none. Whole, unlike the console line, which Ray's log monitor can cut in two."""
    path = run_dir / "ckpt" / "logs" / "metrics.jsonl"
    steps: dict[int, dict[str, float]] = {}
    for line in path.read_text(errors="replace").splitlines() if path.is_file() else []:
        try:
            record = json.loads(line)
            steps[int(record["step"])] = {k: float(v) for k, v in record["data"].items()}
        except (ValueError, KeyError, TypeError):  # a line cut by a killed run
            continue
    return steps


def startup_record(run_dir: Path) -> list | None:
    """The start-up breakdown a finished training run wrote (`logs/startup.json`: [{"seconds", "what"}], seconds
    since launch, by training/report/startup.py); None without one."""
    path = run_dir / "logs" / "startup.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def train_run(run: str, sequences: int):
    """A training stage whose run writes into `run` and samples `sequences` responses a step: per step the kept
    metrics (from the run's metrics.jsonl; the console's step lines for a run from before it) and the generation's
    tokens/s (response tokens / timing_s/gen), the checkpoint's step, and from the step lines' arrival times the
    seconds from launch to the first rollout (step 1 starts with it) and from the first step's end to the last's
    (`after_first_step_s`: the timed steps' wall time, with whatever ran between verl's step timers, such as an
    async trainer's generation in the background)."""

    def collect(stage_dir: Path, log: Path, marks: dict[str, float]) -> dict:
        run_dir = stage_dir.parent / run
        steps = logged_metrics(run_dir) or step_metrics(log)
        results: dict = {"steps": {}}
        for step, metrics in sorted(steps.items()):
            kept = {k: v for k, v in metrics.items() if KEPT.match(k)}
            gen, length = metrics.get("timing_s/gen"), metrics.get("response_length/mean")
            if gen and length:
                kept["gen_tokens_per_s"] = round(length * sequences / gen, 1)
            results["steps"][step] = kept
        tracker = run_dir / "ckpt" / "latest_checkpointed_iteration.txt"
        results["checkpoint_step"] = int(tracker.read_text().strip()) if tracker.is_file() else None
        first = min(steps) if steps else None
        if first is not None and f"step:{first}" in marks and "timing_s/step" in steps[first]:
            results["launch_to_step_end_s"] = round(marks[f"step:{first}"], 1)
            results["launch_to_first_rollout_s"] = round(marks[f"step:{first}"] - steps[first]["timing_s/step"], 1)
            last = max(steps)
            if last > first and f"step:{last}" in marks:
                results["after_first_step_s"] = round(marks[f"step:{last}"] - marks[f"step:{first}"], 1)
        if startup := startup_record(run_dir / "ckpt"):
            results["startup"] = startup
        return results

    return collect


def exported(model: str):
    def collect(stage_dir: Path, log: Path, marks: dict[str, float]) -> dict:
        model_dir = stage_dir.parent / model
        files = sorted(p.name for p in model_dir.iterdir()) if model_dir.is_dir() else []
        size = sum(p.stat().st_size for p in model_dir.glob("*.safetensors")) if files else 0
        return {"files": files, "safetensors_mib": round(size / 2**20, 1)}

    return collect


def evaluation(output_dir: str):
    """The evaluator's results.json files under `output_dir` (greedy/, sampled/): each one's overall accuracy with its
    interval, sample count and samples/s (its per-task rows stay in the file and the log's tables)."""

    def collect(stage_dir: Path, log: Path, marks: dict[str, float]) -> dict:
        output = stage_dir.parent / output_dir
        found = {}
        for path in sorted(output.rglob("results.json")):
            name, data = str(path.relative_to(output)), json.loads(path.read_text())
            if not isinstance(data, dict):
                found[name] = type(data).__name__
                continue
            overall, run = data.get("overall") or {}, data.get("run") or {}
            found[name] = {
                "accuracy": overall.get("accuracy"), "accuracy_ci95": overall.get("accuracy_ci95"),
                "samples": overall.get("n_samples"), "samples_per_s": run.get("samples_per_s")}
        return {"evaluations": found, "tail": log.read_text(errors="replace").splitlines()[-12:]}

    return collect


def pipeline_run(run: str):
    """`python -m training.pipeline`'s run folder: each stage's seconds (RUN/stages/*.json), the decided comparison's
    overall and beyond-prior rows (RUN/eval/compare), and the verdict sentence from the log."""

    def collect(stage_dir: Path, log: Path, marks: dict[str, float]) -> dict:
        run_dir = stage_dir.parent / run
        seconds = {path.stem: round(json.loads(path.read_text())["seconds"], 1)
                   for path in sorted((run_dir / "stages").glob("*.json"))}
        rows = {}
        for path in sorted((run_dir / "eval" / "compare").rglob("comparison.json")):
            cmp = json.loads(path.read_text())
            rows[str(path.parent.relative_to(run_dir / "eval" / "compare")) or "."] = {
                name: {k: (cmp.get(name) or {}).get(k) for k in ("base", "trained", "paired_items", "paired_delta",
                                                                 "ci95", "verdict")}
                for name in ("overall", "beyond_prior")}
        verdicts = [line.split("[pipeline] verdict: ", 1)[1] for line in log.read_text(errors="replace").splitlines()
                    if "[pipeline] verdict: " in line]
        return {"stage_seconds": seconds, "to_verdict_s": round(sum(seconds.values()), 1), "comparisons": rows,
                "verdict": verdicts[-1] if verdicts else None, "startup": startup_record(run_dir / "checkpoints")}

    return collect


def json_file(name: str):
    def collect(stage_dir: Path, log: Path, marks: dict[str, float]) -> dict:
        path = stage_dir.parent / name
        return json.loads(path.read_text()) if path.is_file() else {"missing": str(path)}

    return collect


def junit(name: str):
    """pytest's junit XML: counts and each test's outcome and seconds."""

    def collect(stage_dir: Path, log: Path, marks: dict[str, float]) -> dict:
        path = stage_dir.parent / name
        if not path.is_file():
            return {"missing": str(path)}
        suite = ElementTree.parse(path).getroot()
        suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
        cases = {}
        for case in suite.iter("testcase"):
            outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
            cases[f"{case.get('classname')}::{case.get('name')}"] = [outcome, round(float(case.get("time", 0)), 1)]
        return {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")} | {"cases": cases}

    return collect
