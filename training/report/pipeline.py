"""From a training config to a base-vs-trained comparison in one command, every output in one run folder.

    python -m training.pipeline --config-name quickstart --run-dir runs/quickstart [hydra overrides ...]
        [--eval-config configs/eval/smoke.yaml] [--eval-backend hf] [--eval-override suite.size=8 ...]
    python -m training.pipeline --config-name quickstart --run-dir RUN --trained checkpoints/rg-grpo/quickstart
        (a run trained already: export, evaluate and compare only)
    python -m training.pipeline --config-name quickstart --checkpoints checkpoints/rg-grpo/quickstart \
        --run-dir checkpoints/rg-grpo/quickstart/heldout   (training's folder chosen: `make quickstart`)

Stages, each the command a user would run, in its own process:
  1. train      training/train_grpo.py with checkpoints in RUN/checkpoints or --checkpoints (verl resumes; a
                finished run exits 0); its console lines are shown as well as logged
  2. export     utils/load_fsdp_to_hf.py of the latest checkpoint -> RUN/model
  3. eval-base  evaluation/evaluate_model.py on the base model -> RUN/eval/base (cached: evaluated once per model,
                suite, scoring and sampling)
  4. eval-trained  the same on RUN/model -> RUN/eval/trained
  5. compare    evaluation/evaluate_model.py --compare -> RUN/eval/compare, its summary printed; then RUN/summary.png
                (in-training validation beside the held-out change per group) and the verdict in one sentence;
                under "Not resolved", what that means and the command to try next (more steps, resuming)
Both evaluations score and sample as training did (`--from-run`: the run's reward options, system prompt,
temperature, top_p and max tokens); `--eval-override` may still change them, for both.
A finished stage writes RUN/stages/<stage>.json with its command; a rerun skips a stage whose record matches the
command it would run (and re-exports when training went further). The evaluator resumes its own partial runs.
The eval suite is --eval-config, else `env.eval_suite` of the training config, else one derived from the training mix
(each task's evaluation split, 150 items a task: evaluation/mix_suite.py), written to RUN/eval/suite.yaml.
On a CPU (HF backend) the base model's evaluation runs beside training, in one thread at idle priority
(SCHED_IDLE: it runs only when training leaves a core idle, which its start-up, validation and generation do), and
training is then waited for; `--one-at-a-time` runs the stages one after another. The evaluator's answers are the
same bits in one thread as in two (BENCHMARKS.md), so either order writes the same results.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from envs.run_scoring import SCORING
from training.report.verdict import one_answer_gains, plot_summary, unresolved_advice, verdict_sentence

REPO = Path(__file__).resolve().parents[2]
STAGES = ("train", "export", "eval-base", "eval-trained", "compare")


def parse_args(argv: list[str] | None = None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="python -m training.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config-name", required=True, help="training config (configs/NAME.yaml)")
    parser.add_argument("--run-dir", required=True, type=Path, help="folder for every output of the run")
    parser.add_argument("--eval-config", default=None,
                        help="eval suite YAML (default: the config's env.eval_suite, else one derived from its mix)")
    parser.add_argument("--eval-backend", default=None, help="vllm | hf | openai (default: hf without a GPU)")
    parser.add_argument("--eval-override", action="append", default=[], help="key=value for the eval suite")
    parser.add_argument("--trained", type=Path, default=None,
                        help="a finished training run's folder (trainer.default_local_dir): skip training, use it")
    parser.add_argument("--checkpoints", type=Path, default=None,
                        help="training's folder (trainer.default_local_dir; default RUN/checkpoints)")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="on a CPU, evaluate the base model after training instead of beside it")
    args, overrides = parser.parse_known_args(argv)
    if args.trained is not None and args.checkpoints is not None:
        parser.error("--trained DIR is a finished run's folder, --checkpoints DIR one to train into: give one")
    return args, overrides


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

    def done(self, stage: str, cmd: list[str], key: dict) -> bool:
        """Whether the stage's record holds this command and key (a rerun skips it)."""
        record = self.record(stage)
        return record is not None and record["cmd"] == cmd and record["key"] == key

    def stage(self, stage: str, cmd: list[str], key: dict, outputs: tuple[Path, ...] = (), *,
              show: bool = False, quiet: bool = False) -> None:
        """Runs `cmd` unless the stage's record holds the same command and key; records it when it succeeds.
        When the key changed (e.g. a newer checkpoint), `outputs` are removed first so that nothing stale is
        resumed; after an interrupted run with the same key they are kept (the evaluator resumes them).
        `show`: the command's output goes to the console as well as to the stage's log. `quiet`: a skip says nothing.
        """
        if quiet and self.done(stage, cmd, key):
            return
        started = self.start(stage, cmd, key, outputs, show=show)
        if started is not None:
            started.wait()

    def start(self, stage: str, cmd: list[str], key: dict, outputs: tuple[Path, ...] = (), *, show: bool = False,
              beside: str | None = None, env: dict | None = None) -> "Started | None":
        """Starts the stage's command (see `stage`) and returns it running; None when its record says it is done.
        `beside`: what it runs beside, said on the console; it then runs in one thread at idle priority.
        `env`: environment variables the command gets on top of ours."""
        done = self.record(stage)
        if self.done(stage, cmd, key):
            print(f"[pipeline] {stage}: done earlier ({done['seconds']:.0f} s), skipped", flush=True)
            return None
        if done is not None and done["key"] != key:
            for output in outputs:
                shutil.rmtree(output, ignore_errors=True)
        log = self.dir / "logs" / f"{stage}.log"
        log.parent.mkdir(exist_ok=True)
        out = open(log, "a")
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        terminal = show and sys.stdout.isatty()  # the command draws its own progress bar there: let it
        if beside:
            env.update(OMP_NUM_THREADS="1")
            print(f"[pipeline] {stage}: started beside {beside}, in one thread at idle priority "
                  f"(command and output: {_short(log)})", flush=True)
        elif show:
            where = "its own logs" if terminal else _short(log)
            print(f"[pipeline] {stage}: {' '.join(cmd[1:4])} ... (its output below; also in {where})", flush=True)
            if terminal:
                out.write("(its output went to the terminal; the training run's own logs are in its logs/ folder)\n")
                out.flush()
        else:
            print(f"[pipeline] {stage}: ", end="", flush=True)  # "finished in N s (log ...)" follows on this line
        stdout = None if terminal else subprocess.PIPE if show else out
        process = subprocess.Popen(cmd, cwd=REPO, stdout=stdout, stderr=None if terminal else subprocess.STDOUT,
                                   env=env, text=True)
        if beside:
            _idle_priority(process.pid)  # before it has imported anything, let alone started a thread
        return Started(self, stage, cmd, key, log, out, process, beside if beside else "" if show else None)


class Started:
    """A stage's command, running: `wait` streams its output (when shown), then records it or exits with its log."""

    def __init__(self, run: Run, stage: str, cmd: list[str], key: dict, log: Path, out, process,
                 beside: str | None):
        self.run, self.stage, self.cmd, self.key, self.log, self.out = run, stage, cmd, key, log, out
        self.process, self.start, self.beside = process, time.perf_counter(), beside
        self.launched = time.time()  # wall clock, to compare with files' modification times
        self.ended: float | None = None  # when the command exited (a stage beside another ends unwatched)
        if beside:
            threading.Thread(target=self._note_end, name=f"{stage} ended", daemon=True).start()

    def _note_end(self) -> None:
        self.process.wait()
        self.ended = time.perf_counter()

    def wait(self) -> None:
        if self.beside and self.process.poll() is None:
            print(f"[pipeline] {self.stage}: still running ({time.perf_counter() - self.start:.0f} s so far), "
                  "waiting for it", flush=True)
        if self.process.stdout is not None:
            for line in self.process.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                self.out.write(line)
        code = self.process.wait()
        self.out.close()
        own_line = self.beside is not None  # else "[pipeline] STAGE: " waits on the console for how it ended
        prefix = f"[pipeline] {self.stage}: " if own_line else ""
        if code:
            tail = self.log.read_text()[-3000:]
            sys.exit(f"{prefix}failed (exit {code}); log: {self.log}\n{tail}\n"
                     f"[pipeline] fix it and run the same command again: finished stages are skipped")
        seconds = (self.ended or time.perf_counter()) - self.start
        record = {"cmd": self.cmd, "key": self.key, "seconds": seconds}
        tmp = self.run.dir / "stages" / f".{self.stage}.json.tmp"
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, self.run.dir / "stages" / f"{self.stage}.json")
        how = f" beside {self.beside}" if self.beside else ""
        print(f"{prefix}finished{how} in {seconds:.0f} s (command and output: {_short(self.log)})", flush=True)

    def stop(self) -> None:
        """Ends the command early (the run stops: a failed or interrupted stage beside it); its partial outputs stay
        for the evaluator to resume."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.out.close()


def _idle_priority(pid: int) -> None:
    """Gives process `pid` the CPU only when nothing else wants it (Linux SCHED_IDLE; else nice 19)."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, pid, 19)


class Beside:
    """A stage started beside training once training has written `ready` (its scoring.json, which the evaluator's
    --from-run reads) in this launch; `started` is that stage running, None until then (and if training ends first).
    A thread watches for the file, because the console streams training's output meanwhile."""

    def __init__(self, run: Run, train: Started, ready: Path, stage: str, cmd: list[str], key: dict):
        self.started: Started | None = None
        self._watcher = threading.Thread(target=self._watch, args=(run, train, ready, stage, cmd, key),
                                         name=f"start {stage}", daemon=True)
        self._watcher.start()

    def _watch(self, run: Run, train: Started, ready: Path, stage: str, cmd: list[str], key: dict) -> None:
        while train.process.poll() is None:
            if ready.is_file() and ready.stat().st_mtime >= train.launched:
                self.started = run.start(stage, cmd, key, beside="training")
                return
            time.sleep(0.5)

    def finish(self) -> None:
        """After training succeeded: waits for the stage (and records it) if it started."""
        self._watcher.join()
        if self.started is not None:
            self.started.wait()

    def stop(self) -> None:
        """Training failed or was interrupted: the stage stops too (it resumes next time)."""
        self._watcher.join()
        if self.started is not None:
            self.started.stop()


def main(argv: list[str] | None = None) -> int:
    args, overrides = parse_args(argv)
    run = Run(args.run_dir)
    cfg, base_model = resolved_training_config(args.config_name, overrides)
    import torch

    on_cpu = not torch.cuda.is_available()
    suite = held_out_suite(args.eval_config or cfg.env.get("eval_suite"), str(cfg.env.mix), run.dir, on_cpu)
    backend = args.eval_backend or ("hf" if on_cpu else None)
    py = sys.executable
    checkpoints = (args.trained or args.checkpoints or run.dir / "checkpoints").resolve()
    evaluate = [py, "evaluation/evaluate_model.py", "--config", str(suite), "--from-run", str(checkpoints),
                *(["--backend", backend] if backend else [])]
    eval_overrides = list(args.eval_override)
    base_cmd = [*evaluate, "--cache", "--model", base_model, "--output", str(run.dir / "eval" / "base"),
                *eval_overrides]
    base: Beside | None = None  # eval-base, when it runs beside training
    if args.trained is None:
        train_cmd = [py, "training/train_grpo.py", "--config-name", args.config_name, *overrides,
                     f"trainer.default_local_dir={checkpoints}", f"hydra.run.dir={run.dir / 'hydra'}"]
        beside = on_cpu and backend == "hf" and not args.one_at_a_time and not run.done("eval-base", base_cmd, {})
        # beside: the evaluator takes the cores training leaves idle. Ray starts its workers at nice 15, where an
        # idle-priority process still gets 3/39 of a contended core (CFS weights); at nice 0 it gets 3/1027.
        train = run.start("train", train_cmd, key={}, show=True, env={"RAY_worker_niceness": "0"} if beside else None)
        if train is not None:
            base = Beside(run, train, checkpoints / SCORING, "eval-base", base_cmd, {}) if beside else None
            try:
                train.wait()
            except BaseException:  # failed (SystemExit) or interrupted
                if base is not None:
                    base.stop()
                raise
    if base is not None:
        base.finish()
    step = latest_step(checkpoints)
    if step is None:
        sys.exit(f"[pipeline] training left no checkpoint in {checkpoints}: set trainer.save_freq so that the last "
                 "step is saved (e.g. trainer.save_freq=trainer.total_training_steps)")
    # the step and when its checkpoint was written: a fresh run that reaches the same step is another model
    trained_key = {"step": step, "written": (checkpoints / f"global_step_{step}").stat().st_mtime_ns}
    run.stage("export", [py, "utils/load_fsdp_to_hf.py", str(checkpoints), str(run.dir / "model"), "--force",
                         "--quiet"], key=trained_key)
    run.stage("eval-base", base_cmd, key={}, quiet=base is not None and base.started is not None)  # said already
    run.stage("eval-trained", [*evaluate, "--model", str(run.dir / "model"), "--output",
                               str(run.dir / "eval" / "trained"), *eval_overrides], key=trained_key,
              outputs=(run.dir / "eval" / "trained",))
    run.stage("compare", [py, "evaluation/evaluate_model.py", "--compare", str(run.dir / "eval" / "base"),
                          str(run.dir / "eval" / "trained"), "--output", str(run.dir / "eval" / "compare")],
              key=trained_key, outputs=(run.dir / "eval" / "compare",))
    cmps = print_comparison(run.dir / "eval" / "compare", step)
    summary = summary_png(run.dir, checkpoints, cmps, step)
    print(f"[pipeline] done: tables and plots in {_short(run.dir / 'eval' / 'compare')}, model in "
          f"{_short(run.dir / 'model')}" + (f", training curve and verdict drawn in {_short(summary)}" if summary else ""))
    print(f"[pipeline] verdict: {verdict_sentence(cmps)}")
    advice = unresolved_advice(cmps, step)
    if advice:
        print(f"[pipeline] what it means: {advice}")
        if args.trained is None:  # this command trains: the same one, longer, resumes from the checkpoint judged
            print(f"[pipeline] try next: {more_steps_command(sys.argv[1:] if argv is None else argv, 2 * step)}")
    for line in one_answer_gains(cmps):
        print(f"[pipeline] caution: {line} (comparison.md, columns 'most common answer' and 'repeated answer')")
    return 0


def held_out_suite(chosen: str | None, mix: str, run_dir: Path, on_cpu: bool) -> str:
    """The eval suite file: `chosen` (--eval-config, else the config's env.eval_suite); without one, a suite derived
    from the training mix (evaluation/mix_suite.py) written to RUN/eval/suite.yaml, and the console says so."""
    if chosen:
        return str(chosen)
    import yaml

    from envs.mix import load_mix, mix_path
    from evaluation.mix_suite import describe, suite_from_mix

    suite = suite_from_mix(load_mix(mix_path(mix)), on_cpu)
    path = run_dir / "eval" / "suite.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    print(f"[pipeline] held-out suite: the config names none (env.eval_suite), so the run is judged on "
          f"{describe(Path(mix).stem, suite)}, written to {_short(path)}; --eval-config FILE chooses another",
          flush=True)
    return str(path)


def more_steps_command(argv: list[str], steps: int) -> str:
    """This pipeline's command line with trainer.total_training_steps=`steps` in place of any it had (`make
    quickstart`'s command is its own line of the Makefile: this prints it with the override, to paste)."""
    kept = [a for a in argv if a.lstrip("+").split("=", 1)[0] != "trainer.total_training_steps"]
    return shlex.join([_short(Path(sys.executable)), "-m", "training.pipeline", *kept,
                       f"trainer.total_training_steps={steps}"])


def summary_png(run_dir: Path, checkpoints: Path, cmps: dict, step: int | None = None) -> Path | None:
    """RUN/summary.png (training/report/verdict.py); None, said on the console, when it cannot be drawn."""
    from training.report.report import load_run

    try:
        return plot_summary(load_run(checkpoints), cmps, run_dir / "summary.png", step)
    except Exception as err:  # a missing plot must not hide the verdict
        print(f"[pipeline] summary.png not drawn: {type(err).__name__}: {err}")
        return None


def print_comparison(compare_dir: Path, step: int) -> dict:
    """Prints the held-out comparison in a few lines (evaluation.compare.summary_lines); returns it."""
    from evaluation.compare import load_comparisons, summary_lines

    cmps = load_comparisons(str(compare_dir))
    print(f"[pipeline] held-out evaluation, base vs trained (step {step}), paired 95% intervals over questions:")
    for line in summary_lines(cmps):
        print(f"  {line}")
    return cmps


if __name__ == "__main__":
    sys.exit(main())
