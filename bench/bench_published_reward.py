"""Reasoning Gym's own reading of its published zero-shot completions beside this project's reward, task by task.

    .venv/bin/python bench/bench_published_reward.py --eval-repo /tmp/rg-eval \
        --out bench/figures/published_reward.json

--eval-repo is a clone of open-thought/reasoning-gym-eval, or a folder holding its reasoninggym-paper-experiments/
zero-shot/ (the output quotes its answers: see NOTICE). Every published completion whose item this Reasoning Gym still
draws (matched by question, evaluation.published_scores) is scored twice: (a) as Reasoning Gym reads it,
`reasoning_gym.utils.extract_answer` then the task's own scorer, full marks = exactly 1.0; (b) by
`envs.reward.score_response` with the reward options the published suites use, full marks = acc 1.0. Per task it
counts agreements and both kinds of disagreement, names each disagreement's cause (a repaired scorer, answer
extraction, an answer-form rule of the project, or other) with a few examples, and lists the right answers the project
scores below full marks for their form alone (`20.0` for 20, `1,234`, `$...$`, ...: the normalised answer scores full
marks, or equals the normalised gold).

Why: the project's reward must not be stricter or looser than it means to be on real model output, and the published
runs are 20 models' worth of it. Resumable: each published file's row is appended to --work, keyed by a digest of the
reward's code (envs/*.py), so a rerun after a reward change scores everything again and an interrupted one goes on.
Both sets, 2 processes, 2 shared cores: 622 s (1068 s under a load of 5); sympy's intermediate_integration is slowest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import sys
import time
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EXAMPLES = 3  # kept per task and cause of disagreement
FORM_EXAMPLES = 2  # kept per task and answer form
TEXT_LIMIT = 160  # characters of an answer's repr kept in an example
CAUSES = ("repaired scorer", "answer extraction", "answer form", "other")
DIRECTIONS = ("project_only", "rg_only")  # full marks from the project alone, from Reasoning Gym alone


class _Timeout(BaseException):
    """Raised by SIGALRM; a BaseException so that no scorer's `except Exception` swallows it."""


def _alarm(signum, frame):
    raise _Timeout()


def timed(call, seconds: float):
    """call() under a timer (a scorer looping in Python stops; one stuck in C code is not stopped): (value, error)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return call(), ""
    except _Timeout:
        return None, f"timed out after {seconds:g} s"
    except Exception as exc:  # a published answer Reasoning Gym's scorer cannot read
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


@lru_cache(maxsize=256)
def rg_scorer(task: str, config_text: str):
    """Reasoning Gym's own scorer of `task` built with its config, as its evaluation script builds it."""
    import reasoning_gym

    return reasoning_gym.create_dataset(task, seed=0, size=1, **json.loads(config_text)).score_answer


def rg_reading(text: str, item, timeout_s: float) -> tuple[str | None, bool, str]:
    """Reasoning Gym's reading: (the answer its extract_answer reads, full marks?, the scorer's error if any)."""
    from reasoning_gym.utils import extract_answer

    from envs.generation import config_key

    answer = extract_answer(text)
    score, error = timed(lambda: rg_scorer(item.task, config_key(item.config))(answer, item.entry), timeout_s)
    return answer, score == 1.0, error


def project_reading(text: str, item, options) -> dict:
    """The project's reading: envs.reward.score_response as the suite scores (in this process, under a timer)."""
    from envs.reward import score_response, zero_result

    result, error = timed(lambda: score_response(text, item.entry, item.task, options, item.config), options.timeout_s)
    return result if result is not None else zero_result(item.task, error, text)


def form_rule(result: dict) -> str:
    """The answer form the project's reward says it read a right answer in: its reason on a full-marks result (a
    right answer read as written carries none)."""
    return result["reason"] if result["acc"] == 1.0 and result["answer_found"] else ""


def cause_of(task: str, rg_answer: str | None, result: dict) -> str:
    """Why the two readings disagree, the first that applies: the project read the answer in a form it names; it
    scores the task with a repaired scorer (envs.scorers.is_repaired); the two read different answer strings; else
    other."""
    from envs.scorers import is_repaired

    if form_rule(result):
        return "answer form"
    if is_repaired(task):
        return "repaired scorer"
    if rg_answer != result["pred"]:
        return "answer extraction"
    return "other"


# Answer forms that a right answer may come in: each turns the form into the plain one, or returns the text unchanged.
_WHOLE_DECIMAL = re.compile(r"(?<![\d.])(-?\d+)\.0+(?![\d.])")
_THOUSANDS = re.compile(r"(?<![\d,.])(-?\d{1,3}(?:,\d{3})+)(?![\d,])")
_MATH = re.compile(r"\$\$(.*)\$\$|\$(.*)\$|\\\((.*)\\\)|\\\[(.*)\\\]", re.S)
_QUOTES = re.compile(r"\"(.*)\"|'(.*)'|`(.*)`|\u201c(.*)\u201d|\u2018(.*)\u2019", re.S)
_PREFIX = re.compile(r"[A-Za-z_][\w ()]{0,24}?\s*(?:=|:)\s*(\S.*)", re.S)
_UNITS = re.compile(r"[$\u20ac\u00a3]?\s*(-?[\d,]*\.?\d+)\s*(?:[A-Za-z%\u00b0][A-Za-z%\u00b0/. ]*)?")


def _unwrapped_math(text: str) -> str:
    found = _MATH.fullmatch(text)
    return text if found is None else next(g for g in found.groups() if g is not None)


def _unquoted(text: str) -> str:
    found = _QUOTES.fullmatch(text)
    return text if found is None else next(g for g in found.groups() if g is not None)


def _boxed(text: str) -> str:
    from envs.answers import last_boxed

    inside = last_boxed(text) if "\\boxed{" in text else None
    return text if inside is None else inside.strip()


def _prefix(text: str) -> str:
    found = _PREFIX.fullmatch(text.strip())
    return text if found is None or "\n" in text.strip() else found.group(1).strip()


def _units(text: str) -> str:
    found = _UNITS.fullmatch(text.strip())
    return text if found is None else found.group(1)


FORMS = {
    "whole number as N.0": lambda text: _WHOLE_DECIMAL.sub(r"\1", text),
    "thousands separators": lambda text: _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), text),
    "$...$ or \\(...\\) wrapper": lambda text: _unwrapped_math(text.strip()).strip(),
    "\\boxed{} inside the tags": _boxed,
    "spaces at line ends": lambda text: "\n".join(line.rstrip() for line in text.strip("\n").split("\n")),
    "letter case": str.lower,
    "final full stop": lambda text: text[:-1].rstrip() if text.rstrip().endswith(".") else text,
    "surrounding quotes": lambda text: _unquoted(text.strip()).strip(),
    "x = 5 prefix": _prefix,
    "units or currency": _units,
}


FORMS_THE_GOLD_MAY_HAVE = ("letter case", "spaces at line ends")  # compared with the gold in that form too


def form_hits(answer: str, item, options) -> list[tuple[str, str]]:
    """[(form, how)] for each form whose normalisation shows `answer` (scored below full marks) to be the gold:
    "scorer" when the project's scoring gives the normalised answer full marks, "text" when answer and gold are the
    same text once both are normalised (a scorer stricter about that form than the gold's own text)."""
    from envs.reward import score_answer

    gold = str(item.entry.get("answer"))
    hits = []
    for form, normalise in FORMS.items():
        plain = normalise(answer)
        if plain == answer:
            continue
        score, _ = timed(lambda: score_answer(item.task, plain, item.entry, item.config, options.strict_answers)[0],
                         options.timeout_s)
        if score == 1.0:
            hits.append((form, "scorer"))
        elif plain.strip() == gold.strip() or (plain == normalise(gold) and form in FORMS_THE_GOLD_MAY_HAVE):
            hits.append((form, "text"))
    return hits


def shown(text) -> str:
    """A short repr of an answer, for an example."""
    return repr(text)[:TEXT_LIMIT]


def score_file(job: tuple) -> dict:
    """One published task file of one model: both readings of every matched completion, counted, with examples."""
    from evaluation.published_scores import completion_texts, match_results

    name, model, key, path, items, options = job
    started = time.perf_counter()
    published = json.loads(Path(path).read_text())
    row = {"set": name, "model": model, "task": key, "completions": 0, "left_out": 0, "agree": 0,
           **dict.fromkeys(DIRECTIONS, 0), "causes": {}, "examples": {}, "forms": {}, "rg_errors": 0}
    for result, item in match_results(published["results"], items):
        if item is None:
            row["left_out"] += 1
            continue
        for text in completion_texts(result):
            row["completions"] += 1
            rg_answer, rg_full, rg_error = rg_reading(text, item, options.timeout_s)
            row["rg_errors"] += bool(rg_error)
            scored = project_reading(text, item, options)
            project_full = scored["acc"] == 1.0
            if not project_full and scored["pred"] is not None:
                for form, how in form_hits(scored["pred"], item, options):
                    kept = row["forms"].setdefault(form, {"count": 0, "by_scorer": 0, "examples": []})
                    kept["count"] += 1
                    kept["by_scorer"] += how == "scorer"
                    if len(kept["examples"]) < FORM_EXAMPLES:
                        kept["examples"].append({"model": model, "answer": shown(scored["pred"]),
                                                 "gold": shown(item.entry.get("answer")), "how": how})
            if project_full == rg_full:
                row["agree"] += 1
                continue
            direction = DIRECTIONS[0] if project_full else DIRECTIONS[1]
            row[direction] += 1
            cause = cause_of(item.task, rg_answer, scored)
            row["causes"].setdefault(cause, dict.fromkeys(DIRECTIONS, 0))[direction] += 1
            kept = row["examples"].setdefault(cause, [])
            if len(kept) < EXAMPLES:
                kept.append({"model": model, "full_marks_from": "project" if project_full else "Reasoning Gym",
                             "rg_answer": shown(rg_answer), "project_answer": shown(scored["pred"]),
                             "gold": shown(item.entry.get("answer")), "project_reason": scored["reason"][:TEXT_LIMIT],
                             "rg_error": rg_error})
    row["seconds"] = round(time.perf_counter() - started, 2)
    return row


def reward_digest() -> str:
    """What the rows depend on: the reward's code (envs/*.py), this script and Reasoning Gym's version."""
    from importlib.metadata import version

    digest = hashlib.sha256(version("reasoning-gym").encode())
    for path in sorted((REPO / "envs").glob("*.py")) + [Path(__file__).resolve()]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def jobs(eval_repo: Path, name: str, only: set[str] | None) -> list[tuple]:
    """One job per published file of set `name` whose task the suite holds."""
    from evaluation.published_scores import model_folders, suite_items

    options, by_task, _ = suite_items(name, only)
    found = []
    for folder in model_folders(eval_repo, name):
        model = folder.name.rsplit("_", 2)[0]
        for path in sorted(folder.glob("*/*.json")):
            key = f"{path.parent.name}/{path.stem}"
            if key in by_task:
                found.append((name, model, key, str(path), by_task[key], options))
    return found


def merge(rows: list[dict]) -> list[dict]:
    """One row per set and task over every model's file: counts summed, the first examples kept."""
    merged: dict[tuple, dict] = {}
    for row in sorted(rows, key=lambda r: (r["set"], r["task"], r["model"])):
        into = merged.setdefault((row["set"], row["task"]), {
            "set": row["set"], "task": row["task"], "models": 0, "completions": 0, "left_out": 0, "agree": 0,
            **dict.fromkeys(DIRECTIONS, 0), "rg_errors": 0, "causes": {}, "examples": {}, "forms": {}})
        into["models"] += 1
        for field in ("completions", "left_out", "agree", *DIRECTIONS, "rg_errors"):
            into[field] += row[field]
        for cause, counts in row["causes"].items():
            for direction, count in counts.items():
                into["causes"].setdefault(cause, dict.fromkeys(DIRECTIONS, 0))[direction] += count
        for cause, examples in row["examples"].items():
            kept = into["examples"].setdefault(cause, [])
            kept.extend(examples[:EXAMPLES - len(kept)])
        for form, found in row["forms"].items():
            kept = into["forms"].setdefault(form, {"count": 0, "by_scorer": 0, "examples": []})
            kept["count"] += found["count"]
            kept["by_scorer"] += found["by_scorer"]
            kept["examples"].extend(found["examples"][:FORM_EXAMPLES - len(kept["examples"])])
    return list(merged.values())


def disagreement_table(tasks: list[dict]) -> str:
    """Markdown: the tasks where the two readings disagree, with the causes (project only / RG only)."""
    lines = ["| set | task | completions | agree | full marks: project only | RG only | "
             + " | ".join(CAUSES) + " |", "|---|---|---:|---:|---:|---:|" + "---:|" * len(CAUSES)]
    for task in tasks:
        if task["project_only"] or task["rg_only"]:
            causes = [task["causes"].get(c) for c in CAUSES]
            cells = [f"{c['project_only']}/{c['rg_only']}" if c else "" for c in causes]
            lines.append(f"| {task['set']} | {task['task']} | {task['completions']} | {task['agree']} | "
                         f"{task['project_only']} | {task['rg_only']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def forms_table(tasks: list[dict]) -> str:
    """Markdown: right answers the project scores below full marks for their form, per task and form."""
    lines = ["| set | task | form | completions (of the task's) | scorer accepts the plain form | "
             "example: answer -> gold |", "|---|---|---|---:|---:|---|"]
    for task in tasks:
        for form, found in sorted(task["forms"].items(), key=lambda kv: -kv[1]["count"]):
            example = found["examples"][0]
            lines.append(f"| {task['set']} | {task['task']} | {form} | {found['count']} of {task['completions']} | "
                         f"{found['by_scorer']} | `{example['answer']}` -> `{example['gold']}` |")
    return "\n".join(lines)


def run(eval_repo: Path, sets: list[str], only: set[str] | None, work: Path, processes: int) -> list[dict]:
    """Scores every job not yet in --work's rows for this reward digest; returns all rows of the requested sets."""
    import multiprocessing

    work.mkdir(parents=True, exist_ok=True)
    cache = work / f"rows-{reward_digest()}.jsonl"
    done = {}
    if cache.exists():
        for line in cache.read_text().splitlines():
            row = json.loads(line)
            done[(row["set"], row["model"], row["task"])] = row
    todo = [job for name in sets for job in jobs(eval_repo, name, only) if job[:3] not in done]
    print(f"{len(todo)} published files to score ({len(done)} already in {cache})", flush=True)
    started = time.perf_counter()
    with open(cache, "a") as out, multiprocessing.get_context("fork").Pool(processes) as pool:
        for count, row in enumerate(pool.imap_unordered(score_file, todo, chunksize=1), 1):
            out.write(json.dumps(row) + "\n")
            out.flush()
            done[(row["set"], row["model"], row["task"])] = row
            print(f"[{count}/{len(todo)} {time.perf_counter() - started:.0f} s] {row['set']} {row['model']} "
                  f"{row['task']}: {row['completions']} completions, {row['project_only']} project only, "
                  f"{row['rg_only']} RG only ({row['seconds']} s)", flush=True)
    return [row for key, row in done.items() if key[0] in sets and (not only or key[2] in only)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eval-repo", type=Path, required=True, help="open-thought/reasoning-gym-eval (or its "
                        "zero-shot results extracted)")
    parser.add_argument("--sets", nargs="+", choices=("easy", "hard"), default=["easy", "hard"])
    parser.add_argument("--tasks", help="only these <category>/<task> keys, comma-separated")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "figures" / "published_reward.json")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench_published_reward"), help="resumable rows")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":  # the suite's items as evaluate_model.py draws them
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), *(argv or sys.argv[1:])])
    from importlib.metadata import version

    import envs.reward  # noqa: F401 - the reward scored: imported before its commit and digest are read

    started = time.perf_counter()
    commit = os.popen(f"git -C {REPO} rev-parse --short HEAD").read().strip()
    if os.system(f"git -C {REPO} diff --quiet HEAD -- envs") != 0:  # the reward scored is not the commit's
        commit += "+uncommitted envs/ edits"
    digest = reward_digest()
    only = set(args.tasks.split(",")) if args.tasks else None
    tasks = merge(run(args.eval_repo, args.sets, only, args.work, args.processes))
    data = {"about": __doc__.split("\n\n")[0], "reasoning_gym": version("reasoning-gym"), "commit": commit,
            "reward_digest": digest, "seconds": round(time.perf_counter() - started), "tasks": tasks}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print("\n" + disagreement_table(tasks) + "\n\n" + forms_table(tasks))
    print(f"\nwrote {args.out} ({args.out.stat().st_size // 1024} KiB) in {data['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
