"""From a training config to a base-vs-trained comparison in one command, every output in one run folder.

    python -m training.pipeline --config-name quickstart --run-dir runs/quickstart [hydra overrides ...]
        [--eval-config configs/eval/smoke.yaml] [--eval-backend hf] [--eval-override suite.size=8 ...]
    python -m training.pipeline --config-name quickstart --run-dir RUN --trained checkpoints/rg-grpo/quickstart
        (a run trained already: export, evaluate and compare only; `make quickstart` ends with this)

Stages, each the command a user would run, in its own process:
  1. train      training/train_grpo.py with checkpoints in RUN/checkpoints (verl resumes; a finished run exits 0)
  2. export     utils/load_fsdp_to_hf.py of the latest checkpoint -> RUN/model
  3. eval-base  evaluation/evaluate_model.py on the base model -> RUN/eval/base (cached: evaluated once per model,
                suite, scoring and sampling)
  4. eval-trained  the same on RUN/model -> RUN/eval/trained
  5. compare    evaluation/evaluate_model.py --compare -> RUN/eval/compare, its summary printed; then RUN/summary.png
                (in-training validation beside the held-out change per group) and the verdict in one sentence
Both evaluations score and sample as training did (`--from-run`: the run's reward options, system prompt,
temperature, top_p and max tokens); `--eval-override` may still change them, for both.
A finished stage writes RUN/stages/<stage>.json with its command; a rerun skips a stage whose record matches the
command it would run (and re-exports when training went further). The evaluator resumes its own partial runs.
The eval suite is `env.eval_suite` of the training config unless --eval-config is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from training.report.verdict import one_answer_gains, plot_summary, verdict_sentence

REPO = Path(__file__).resolve().parents[2]
STAGES = ("train", "export", "eval-base", "eval-trained", "compare")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m training.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config-name", required=True, help="training config (configs/NAME.yaml)")
    parser.add_argument("--run-dir", required=True, type=Path, help="folder for every output of the run")
    parser.add_argument("--eval-config", default=None, help="eval suite YAML (default: the config's env.eval_suite)")
    parser.add_argument("--eval-backend", default=None, help="vllm | hf | openai (default: hf without a GPU)")
    parser.add_argument("--eval-override", action="append", default=[], help="key=value for the eval suite")
    parser.add_argument("--trained", type=Path, default=None,
                        help="a finished training run's folder (trainer.default_local_dir): skip training, use it")
    return parser.parse_known_args(argv)


def resolved_training_config(config_name: str, overrides: list[str]):
    """Returns the composed training config with the model path resolved (what the base evaluation loads)."""
    from training.launch.config import compose_config, resolve_model_path

    cfg = compose_config(config_name, overrides)
    return cfg, resolve_model_path(cfg.actor_rollout_ref.model.path)


def latest_step(checkpoints: Path) -> int | None:
    marker = checkpoints / "latest_checkpointed_iteration.txt"
    return int(marker.read_text().strip()) if marker.is_file() else None


def _short(path: Path) -> str:
    """`path` relative to the working directory when it is under it (console lines stay short)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Run:
    """The run folder: stage records and the subprocess runner that honours them."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir.resolve()
        (self.dir / "stages").mkdir(parents=True, exist_ok=True)

    def record(self, stage: str) -> dict | None:
        path = self.dir / "stages" / f"{stage}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def stage(self, stage: str, cmd: list[str], key: dict, outputs: tuple[Path, ...] = ()) -> None:
        """Runs `cmd` unless the stage's record holds the same command and key; records it when it succeeds.
        When the key changed (e.g. a newer checkpoint), `outputs` are removed first so that nothing stale is
        resumed; after an interrupted run with the same key they are kept (the evaluator resumes them)."""
        done = self.record(stage)
        if done is not None and done["cmd"] == cmd and done["key"] == key:
            print(f"[pipeline] {stage}: done earlier ({done['seconds']:.0f} s), skipped", flush=True)
            return
        if done is not None and done["key"] != key:
            for output in outputs:
                shutil.rmtree(output, ignore_errors=True)
        log = self.dir / "logs" / f"{stage}.log"
        print(f"[pipeline] {stage}: ", end="", flush=True)  # one line a stage: "finished in N s (log ...)" follows
        start = time.perf_counter()
        log.parent.mkdir(exist_ok=True)
        with open(log, "a") as out:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            code = subprocess.run(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, PYTHONUNBUFFERED="1")).returncode
        if code:
            tail = log.read_text()[-3000:]
            sys.exit(f"failed (exit {code}); log: {log}\n{tail}\n"
                     f"[pipeline] fix it and run the same command again: finished stages are skipped")
        seconds = time.perf_counter() - start
        record = {"cmd": cmd, "key": key, "seconds": seconds}
        tmp = self.dir / "stages" / f".{stage}.json.tmp"
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, self.dir / "stages" / f"{stage}.json")
        print(f"finished in {seconds:.0f} s (command and output: {_short(log)})", flush=True)


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    run = Run(args.run_dir)
    cfg, base_model = resolved_training_config(args.config_name, overrides)
    suite = args.eval_config or cfg.env.get("eval_suite") or "configs/eval/smoke.yaml"
    backend = args.eval_backend
    if backend is None:
        import torch

        backend = "hf" if not torch.cuda.is_available() else None
    py = sys.executable
    if args.trained is None:
        checkpoints = run.dir / "checkpoints"
        run.stage("train", [py, "training/train_grpo.py", "--config-name", args.config_name, *overrides,
                            f"trainer.default_local_dir={checkpoints}", f"hydra.run.dir={run.dir / 'hydra'}"],
                  key={})
    else:
        checkpoints = args.trained.resolve()
    step = latest_step(checkpoints)
    if step is None:
        sys.exit(f"[pipeline] training left no checkpoint in {checkpoints}: set trainer.save_freq so that the last "
                 "step is saved (e.g. trainer.save_freq=trainer.total_training_steps)")
    # the step and when its checkpoint was written: a fresh run that reaches the same step is another model
    trained_key = {"step": step, "written": (checkpoints / f"global_step_{step}").stat().st_mtime_ns}
    run.stage("export", [py, "utils/load_fsdp_to_hf.py", str(checkpoints), str(run.dir / "model"), "--force",
                         "--quiet"], key=trained_key)
    evaluate = [py, "evaluation/evaluate_model.py", "--config", str(suite), "--from-run", str(checkpoints),
                *(["--backend", backend] if backend else [])]
    eval_overrides = list(args.eval_override)
    run.stage("eval-base", [*evaluate, "--cache", "--model", base_model, "--output", str(run.dir / "eval" / "base"),
                            *eval_overrides], key={})
    run.stage("eval-trained", [*evaluate, "--model", str(run.dir / "model"), "--output",
                               str(run.dir / "eval" / "trained"), *eval_overrides], key=trained_key,
              outputs=(run.dir / "eval" / "trained",))
    run.stage("compare", [py, "evaluation/evaluate_model.py", "--compare", str(run.dir / "eval" / "base"),
                          str(run.dir / "eval" / "trained"), "--output", str(run.dir / "eval" / "compare")],
              key=trained_key, outputs=(run.dir / "eval" / "compare",))
    cmps = print_comparison(run.dir / "eval" / "compare", step)
    summary = summary_png(run.dir, checkpoints, cmps)
    print(f"[pipeline] done: tables and plots in {_short(run.dir / 'eval' / 'compare')}, model in "
          f"{_short(run.dir / 'model')}" + (f", validation and verdict drawn in {_short(summary)}" if summary else ""))
    print(f"[pipeline] verdict: {verdict_sentence(cmps)}")
    for line in one_answer_gains(cmps):
        print(f"[pipeline] caution: {line} (comparison.md, columns 'most common answer' and 'repeated answer')")
    return 0


def summary_png(run_dir: Path, checkpoints: Path, cmps: dict) -> Path | None:
    """RUN/summary.png (training/report/verdict.py); None, said on the console, when it cannot be drawn."""
    from training.report.report import load_run

    try:
        return plot_summary(load_run(checkpoints), cmps, run_dir / "summary.png")
    except Exception as err:  # a missing plot must not hide the verdict
        print(f"[pipeline] summary.png not drawn: {type(err).__name__}: {err}")
        return None


def print_comparison(compare_dir: Path, step: int) -> dict:
    """Prints the held-out comparison in a few lines (evaluation.compare.summary_lines); returns it."""
    from evaluation.compare import load_comparisons, summary_lines

    cmps = load_comparisons(str(compare_dir))
    print(f"[pipeline] held-out evaluation, base vs trained (step {step}), paired 95% intervals over items:")
    for line in summary_lines(cmps):
        print(f"  {line}")
    return cmps


if __name__ == "__main__":
    sys.exit(main())
