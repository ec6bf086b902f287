"""The GPU path in stages, for a machine that gives a command 10 minutes and may be gone after it:

    python3 -m gpu_kit.run --export $OUT          # the one command, the same on every call
    python3 -m gpu_kit.run --dry-run --kit-python .venv/bin/python   # on a CPU: stage a, and every command checked

Stages run in order (gpu_kit/gpu_path.py). Each is a command whose output goes to OUT/<stage>/log.txt and whose
record (status, seconds, what its output says) is written to OUT/stages/<stage>.json the moment it ends, so a
command cut off loses nothing; a re-run skips the stages that are done or failed (--retry-failed, --redo ID to run
them again). The runner starts no stage but a command's first with less time left before --until than the
stage's estimate, and stops one still running at --until (status interrupted: the next run starts it again). A stage
whose needs are not done is blocked. At the end OUT/summary.md and the records are copied to --export (at most 8
files come back from the device). Stdlib only: the image's Python runs it; the stages choose their interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
FINISHED = ("done", "failed")
ERROR_LINE = re.compile(r"error\b", re.IGNORECASE)  # "error: ...", "ModuleNotFoundError: ..."
STOPS = ("waiting", "damaged", "deferred", "interrupted")  # the run ends here; the next one continues
LOG_KEEP = 2 << 20  # bytes of each log's end that travel back in logs.tar.gz


@dataclass
class Stage:
    id: str
    title: str
    command: list[str]  # "{kit}", "{image}", "{out}" are replaced at run time
    estimate_s: int = 60  # not started with less time left
    needs: tuple[str, ...] = ()
    collect: Callable | None = None  # (stage dir, log, marks) -> results dict
    check: list[str] | None = None  # --dry-run: a command that checks this one without a GPU
    compose: tuple[str, list[str]] | None = None  # --dry-run: (config name, hydra overrides) to compose
    exit_codes: dict[int, str] = field(default_factory=dict)  # exit code -> status other than failed
    marks: str | None = None  # regex: seconds after launch of the first line matching, by its match
    cleanup: list[str] | None = None  # run after an interrupted or failed stage (e.g. stop Ray)
    fresh: str | None = None  # a folder removed before the command runs (a cut-off first run starts over)


class Runner:
    def __init__(self, stages: list[Stage], out: Path, values: dict[str, str], until_s: float,
                 retry_failed: bool = False, redo: set[str] = frozenset()):
        self.stages, self.out, self.values, self.until_s = stages, out, values, until_s
        self.retry_failed, self.redo = retry_failed, set(redo)
        self.started = time.time()
        (out / "stages").mkdir(parents=True, exist_ok=True)

    def fill(self, words: list[str]) -> list[str]:
        for key, value in self.values.items():
            words = [w.replace("{" + key + "}", value) for w in words]
        return words

    def record(self, stage_id: str) -> dict | None:
        path = self.out / "stages" / f"{stage_id}.json"
        return json.loads(path.read_text()) if path.is_file() else None

    def save(self, stage: Stage, **record) -> dict:
        record = {"stage": stage.id, "title": stage.title, **record}
        path = self.out / "stages" / f"{stage.id}.json"
        path.with_suffix(".tmp").write_text(json.dumps(record, indent=1) + "\n")
        path.with_suffix(".tmp").replace(path)  # a record is whole or absent
        return record

    def run(self) -> int:
        """Runs what is left; returns 1 when a stage failed in this run, else 0."""
        failed, ran = False, 0
        for stage in self.stages:
            old = self.record(stage.id)
            if old and old["status"] in FINISHED and stage.id not in self.redo and not (
                    self.retry_failed and old["status"] == "failed"):
                print(f"[{stage.id}] {old['status']} earlier ({old.get('seconds', 0):.0f} s): skipped")
                continue
            blocked = [n for n in stage.needs if (self.record(n) or {}).get("status") != "done"]
            if blocked:
                self.save(stage, status="blocked", why=f"needs {', '.join(blocked)} done")
                print(f"[{stage.id}] blocked: needs {', '.join(blocked)} done")
                continue
            left = self.until_s - (time.time() - self.started)
            if left < stage.estimate_s and ran:  # the first stage of a command always starts
                self.save(stage, status="deferred", why=f"needs ~{stage.estimate_s} s, {left:.0f} s left")
                print(f"[{stage.id}] deferred: needs ~{stage.estimate_s} s, {left:.0f} s left; run the same "
                      "command again to continue")
                break
            record = self.execute(stage, max(left, 1))
            ran += 1
            failed |= record["status"] == "failed"
            if record["status"] in STOPS:
                break
        return 1 if failed else 0

    def execute(self, stage: Stage, timeout: float) -> dict:
        """Runs one stage's command in its own process group, logging and timestamping its lines."""
        folder = self.out / stage.id
        folder.mkdir(parents=True, exist_ok=True)
        log, command = folder / "log.txt", self.fill(stage.command)
        if stage.fresh:
            shutil.rmtree(self.fill([stage.fresh])[0], ignore_errors=True)
        print(f"[{stage.id}] {stage.title}: {' '.join(command)}", flush=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   WANDB_MODE="disabled")
        marks, started = {}, time.time()
        with open(log, "w") as sink:
            process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, errors="replace", env=env, start_new_session=True)
            # a daemon thread: a process that outlives the stage (Ray's agents) may hold the pipe open
            reader = threading.Thread(target=self._pump, args=(process, sink, stage.marks, marks, started),
                                      daemon=True)
            reader.start()
            try:
                code = process.wait(timeout=timeout)
                status = "done" if code == 0 else stage.exit_codes.get(code, "failed")
            except subprocess.TimeoutExpired:
                code, status = None, "interrupted"
                self._stop(process)
            seconds = time.time() - started
            if stage.cleanup and status in ("failed", "interrupted"):
                subprocess.run(self.fill(stage.cleanup), cwd=REPO, capture_output=True, timeout=120)
            reader.join(timeout=10)
        results, tail = {}, log.read_text(errors="replace").splitlines()[-25:]
        if stage.collect and status in FINISHED:
            try:
                results = stage.collect(folder, log, marks)
            except Exception as err:  # noqa: BLE001 - a collector's fault is recorded with the stage
                results = {"collect_error": f"{type(err).__name__}: {err}"}
        why = tail[-1] if status not in ("done", "failed") and tail else None  # e.g. the parts still missing
        if status == "failed":  # so the summary names the cause: a run's first [fault] line, else the last error
            faults = [line.strip() for line in tail if line.lstrip().startswith("[fault]")]
            errors = [line.strip() for line in tail if ERROR_LINE.search(line)]
            why = (faults or errors[-1:] or [None])[0]
        record = self.save(stage, status=status, exit_code=code, seconds=round(seconds, 1), command=command,
                           log=str(log.relative_to(self.out)), marks=marks, results=results, why=why,
                           ended=time.strftime("%Y-%m-%d %H:%M:%S"))
        print(f"[{stage.id}] {status} in {seconds:.0f} s")
        if status not in ("done", "waiting", "damaged"):
            print("\n".join(f"    {line}" for line in tail))
        return record

    @staticmethod
    def _pump(process, sink, pattern, marks, started) -> None:
        compiled = re.compile(pattern) if pattern else None
        for line in process.stdout:
            sink.write(line)
            sink.flush()
            match = compiled.search(line) if compiled else None
            if match and match[0].strip(" -") not in marks:
                marks[match[0].strip(" -")] = round(time.time() - started, 2)

    @staticmethod
    def _stop(process) -> None:
        for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
            try:
                os.killpg(process.pid, sig)
                process.wait(timeout=wait)
                return
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue

    def dry_run(self) -> int:
        """Checks every stage without a GPU: all hydra compositions in one process (verl's import is slow) beside
        the stages' check commands, three at a time. Records dry-ok or dry-failed (never finished: a real run does
        them all)."""
        specs = {s.id: [s.compose[0], self.fill(s.compose[1])] for s in self.stages if s.compose}
        (self.out / "compose.json").write_text(json.dumps(specs))
        compose = ["{kit}", "-m", "gpu_kit.compose_check", str(self.out / "compose.json")]
        with ThreadPoolExecutor(max_workers=3) as pool:
            composing = pool.submit(self._check, compose) if specs else None
            checks = {s.id: pool.submit(self._check, s.check) for s in self.stages if s.check}
            code, output, errors = composing.result() if composing else (0, "{}", "")
        composed = json.loads(output.strip().splitlines()[-1]) if code == 0 else {n: errors[-1500:] for n in specs}
        failed = 0
        for stage in self.stages:
            problems = [f"compose: {composed.get(stage.id)}"] if stage.compose and composed.get(stage.id) != "ok" \
                else []
            if stage.id in checks and checks[stage.id].result()[0] != 0:
                code, output, errors = checks[stage.id].result()
                problems.append(f"{' '.join(self.fill(stage.check))} exited {code}: {(output + errors)[-1500:]}")
            status = "dry-failed" if problems else "dry-ok"
            failed += bool(problems)
            results = {}
            if stage.collect and stage.check == stage.command and not problems:  # the check was the real thing
                folder = self.out / stage.id
                results = stage.collect(folder, folder / "log.txt", {})
            self.save(stage, status=status, command=self.fill(stage.command), problems=problems, results=results)
            print(f"[{stage.id}] {status}: {' '.join(self.fill(stage.command))}")
            for problem in problems:
                print(f"    {problem}")
        return 1 if failed else 0

    def _check(self, command: list[str]) -> tuple[int, str, str]:
        done = subprocess.run(self.fill(command), cwd=REPO, capture_output=True, text=True, timeout=900,
                              env=dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"))
        return done.returncode, done.stdout, done.stderr


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python3 -m gpu_kit.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "gpu_kit" / "results", help="stage records and logs")
    parser.add_argument("--export", type=Path, help="copy the summary, records and logs here (the device's $OUT)")
    parser.add_argument("--until", type=float, default=540, help="seconds this command may use (default 540)")
    parser.add_argument("--only", help="comma-separated stage ids to consider (default: all)")
    parser.add_argument("--redo", default="", help="comma-separated stage ids to run again although finished")
    parser.add_argument("--retry-failed", action="store_true", help="run failed stages again")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: run stage a, check every other command")
    parser.add_argument("--kit-python", default=str(REPO / ".venv-kit" / "bin" / "python"))
    parser.add_argument("--list", action="store_true", help="print the stages and exit")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    from gpu_kit.gpu_path import build_stages
    from gpu_kit.summary import export, write_summary

    args = parse_args(argv)
    args.out = args.out.resolve()
    stages = build_stages()
    if args.only:
        wanted = set(args.only.split(","))
        stages = [s for s in stages if s.id in wanted]
    if args.list:
        for stage in stages:
            print(f"{stage.id:18} ~{stage.estimate_s:4d} s  {stage.title}")
        return 0
    values = {"kit": os.path.abspath(args.kit_python), "image": sys.executable, "out": str(args.out)}
    runner = Runner(stages, args.out, values,
                    args.until, args.retry_failed, set(filter(None, args.redo.split(","))))
    code = runner.dry_run() if args.dry_run else runner.run()
    summary = write_summary(runner)
    print(summary.read_text())
    if args.export:
        export(args.out, args.export, LOG_KEEP)
    return code


if __name__ == "__main__":
    sys.exit(main())
