"""A self-contained HTML page of a run's generations: what the model wrote, what was expected, what it scored.

    python -m utils.generation_viewer checkpoints/rg-grpo/quickstart -o page.html    # a training run
    python -m utils.generation_viewer outputs/eval/smoke/generations.jsonl -o eval.html   # an evaluator run
    python -m utils.generation_viewer RUN outputs/eval/X -o both.html                 # several inputs on one page

Inputs (files or folders; a folder is searched for the files below, `global_step_*` checkpoint folders skipped):
- training dumps of training/generations.py: `generations/train/<step>.jsonl` (prompt, response, ground_truth, pred,
  score, acc, answer_found, reason, response_length) and `generations/train/steps.jsonl` (per-step task means over
  all of a step's responses: the training chart);
- verl's dumps, `<step>.jsonl` with input, output, gts, score, step, uid and, for validation, our reward fields
  (`trainer.validation_data_dir`, by default `generations/val`); a folder named val*/valid* is validation, any other
  verl dump is `rollout` (verl's own training dump, `trainer.rollout_data_dir`);
- the evaluator's `generations.jsonl` (evaluation/runner.py's make_record): source `eval`, task `<group>/<task_key>`.

The page embeds the rows as JSON and renders them with a small script of its own (no network, no server): filters by
source, step, task, score range, reason and text, kept in the URL hash so that a link reopens the same view
(`page.html#task=chain_sum&step=40&score_max=0`; keys source, step ("-" for none), task, reason, score_min, score_max,
q, order (empty: newest step first; oldest, score, -score) and page); prompt, response (the extracted <answer> block
marked), expected and extracted answer side by side, 25 rows a page (only those are in the DOM); a per-task table of
the current filter and per-task reward over steps (inline SVG). Prompts and responses longer than --max-chars are cut.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

STEP_FILE = re.compile(r"^\d+\.jsonl$")
SUMMARY_FILE = "steps.jsonl"  # training/generations.SUMMARY_FILE (not imported: the viewer needs no training stack)
EVAL_FILE = "generations.jsonl"
DEFAULT_MAX_CHARS = 20_000


# ----- reading -----
def find_files(path: Path) -> list[Path]:
    """Returns the generation and summary files under `path` (a file is returned as given), sorted."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or folder")
    root = path / "generations" if (path / "generations").is_dir() else path
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith("global_step_"))
        found += [Path(folder) / f for f in files if STEP_FILE.match(f) or f in (SUMMARY_FILE, EVAL_FILE)]
    return sorted(found)


def read_jsonl(path: Path) -> Iterable[dict]:
    """Yields the JSON objects of a file; an unreadable line (a run cut mid-write) is skipped."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    value = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(value, dict):
                    yield value


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN -> None


def _clip(text: str | None, max_chars: int) -> str | None:
    if text is None or len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n[... {len(text) - max_chars} more characters not shown]"


def verl_source(path: Path) -> str:
    """`val` for verl's validation dumps (a folder named val*/valid*), else `rollout` (its training dump)."""
    return "val" if path.parent.name.lower().startswith("val") else "rollout"


def normalize(raw: dict, path: Path, max_chars: int) -> dict | None:
    """Returns one page row {source, step, task, group, sample, prompt, response, expected, pred, score, acc, found,
    reason, length, unit} from any of the three formats, or None for a line of none of them."""
    if "item_id" in raw:  # evaluator
        length, unit = raw.get("num_tokens"), "tokens"
        row = {"source": "eval", "step": None, "task": f"{raw.get('group', '')}/{raw.get('task_key', raw.get('task'))}",
               "group": raw["item_id"], "sample": raw.get("sample", 0), "prompt": raw.get("question"),
               "response": raw.get("response"), "expected": raw.get("answer"), "pred": raw.get("pred"),
               "score": raw.get("score"), "acc": raw.get("accuracy"), "found": raw.get("answer_found"),
               "reason": raw.get("reason")}
    elif "prompt" in raw and "response" in raw:  # training/generations.py
        length, unit = raw.get("response_length"), "tokens"
        row = {"source": "train", "step": raw.get("step"), "task": raw.get("task"), "group": raw.get("group"),
               "sample": raw.get("sample", 0), "prompt": raw["prompt"], "response": raw["response"],
               "expected": raw.get("ground_truth"), "pred": raw.get("pred"), "score": raw.get("score"),
               "acc": raw.get("acc"), "found": raw.get("answer_found"), "reason": raw.get("reason")}
    elif "input" in raw and "output" in raw:  # verl's _write_generations
        if raw.get("response_length") is not None:
            length, unit = raw.get("response_length"), "tokens"
        else:
            length, unit = raw.get("response_chars"), "chars"
        uid = str(raw.get("uid", ""))
        parts = uid.rsplit("_", 2)
        row = {"source": verl_source(path), "step": raw.get("step"), "task": raw.get("task"),
               "group": parts[0] if len(parts) == 3 else uid, "sample": None, "prompt": raw["input"],
               "response": raw["output"], "expected": raw.get("gts"), "pred": raw.get("pred"),
               "score": raw.get("score"), "acc": raw.get("acc"), "found": raw.get("answer_found"),
               "reason": raw.get("reason")}
    else:
        return None
    step = _number(row["step"])
    row.update(step=None if step is None else int(step), task=str(row["task"] or "unknown"),
               group=str(row["group"] or ""), prompt=_clip(_text(row["prompt"]), max_chars) or "",
               response=_clip(_text(row["response"]), max_chars) or "", expected=_clip(_text(row["expected"]), 2000),
               pred=_clip(_text(row["pred"]), 2000), score=_number(row["score"]), acc=_number(row["acc"]),
               found=_number(row["found"]), reason=str(row["reason"] or ""), length=_number(length), unit=unit)
    return row


def number_samples(rows: list[dict]) -> None:
    """Gives rows without a sample index (verl's dumps) their position within their (source, step, group)."""
    seen: dict[tuple, int] = defaultdict(int)
    for row in rows:
        key = (row["source"], row["step"], row["group"])
        if row["sample"] is None:
            row["sample"] = seen[key]
        seen[key] += 1


def load(paths: Iterable[Path], max_chars: int = DEFAULT_MAX_CHARS) -> tuple[list[dict], dict[int, dict]]:
    """Returns (rows, training summaries {step: {task: means}}) from files or folders; last summary of a step wins."""
    rows, summaries = [], {}
    for path in paths:
        files = find_files(Path(path))
        for file in files:
            if file.name == SUMMARY_FILE:
                for line in read_jsonl(file):
                    if "step" in line and isinstance(line.get("tasks"), dict):
                        summaries[int(line["step"])] = line["tasks"]
                continue
            rows += [row for row in (normalize(raw, file, max_chars) for raw in read_jsonl(file)) if row]
    rows.sort(key=lambda r: (r["source"], -1 if r["step"] is None else r["step"], r["task"], r["group"]))
    number_samples(rows)
    return rows, summaries


# ----- per-task reward over steps -----
def reward_series(rows: list[dict], summaries: dict[int, dict]) -> dict[str, dict]:
    """Returns {source: {"title", "tasks": {task: [[step, mean reward, samples], ...]}}} for sources with 2+ steps.

    Training uses steps.jsonl (every response of each step) when present, else the dumped rows.
    """
    sums: dict[str, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        if row["step"] is None or row["score"] is None:
            continue
        if row["source"] == "train" and summaries:
            continue
        total = sums[row["source"]][row["task"]].setdefault(row["step"], [0.0, 0])
        total[0] += row["score"]
        total[1] += 1
    series = {}
    for source, tasks in sorted(sums.items()):
        series[source] = {"title": f"{source}: mean reward per task (the dumped generations)",
                          "tasks": {task: [[step, s / n, n] for step, (s, n) in sorted(points.items())]
                                    for task, points in sorted(tasks.items())}}
    if summaries:
        by_task: dict[str, list] = defaultdict(list)
        for step, tasks in sorted(summaries.items()):
            for task, means in sorted(tasks.items()):
                if _number(means.get("reward")) is not None:
                    by_task[task].append([step, float(means["reward"]), int(means.get("samples", 0))])
        series["train"] = {"title": "train: mean reward per task (every response of each step)",
                           "tasks": dict(sorted(by_task.items()))}
    if "val" in series:
        series["val"]["title"] = "val: mean reward per task (the validation set)"
    return {source: s for source, s in sorted(series.items())
            if len({p[0] for points in s["tasks"].values() for p in points}) >= 2}


# ----- the page -----
def _embed(value: Any) -> str:
    """JSON safe inside <script>: no '<' (so no </script>), lone surrogates escaped (not encodable as UTF-8)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = text.replace("<", "\\u003c")
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


def build_page(rows: list[dict], summaries: dict[int, dict] | None = None, title: str = "Generations") -> str:
    """Returns the HTML page of `rows` (from load)."""
    data = {"title": title, "rows": rows, "series": reward_series(rows, summaries or {})}
    return (PAGE.replace("%TITLE%", html.escape(title)).replace("%STYLE%", STYLE).replace("%SCRIPT%", SCRIPT)
            .replace("%DATA%", _embed(data)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m utils.generation_viewer", description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="RUN_OR_FILE",
                        help="a training run folder (trainer.default_local_dir), a generations folder, a <step>.jsonl, "
                             "or an evaluator's generations.jsonl (or its folder)")
    parser.add_argument("-o", "--output", default="generations.html", help="the HTML file to write")
    parser.add_argument("--title", default=None, help="page title (default: the inputs)")
    parser.add_argument("--max-chars", type=int, default=DEFAULT_MAX_CHARS,
                        help="prompt and response characters kept per generation (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        rows, summaries = load([Path(p) for p in args.inputs], args.max_chars)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not rows:
        print(f"error: no generations found in {', '.join(args.inputs)} (expected <step>.jsonl dumps or an "
              "evaluator's generations.jsonl)", file=sys.stderr)
        return 1
    page = build_page(rows, summaries, args.title or " + ".join(args.inputs))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(output.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    os.replace(tmp, output)
    counts = defaultdict(int)
    for row in rows:
        counts[row["source"]] += 1
    listed = ", ".join(f"{source} {count}" for source, count in sorted(counts.items()))
    print(f"wrote {output}: {len(rows)} generations ({listed}), {len(page.encode()) / 1e6:.1f} MB")
    return 0


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%STYLE%</style>
</head><body data-state="loading">
<header><h1>%TITLE%</h1><p id="counts"></p></header>
<section id="charts"></section>
<form id="filters" onsubmit="return false">
  <label>source <select id="f-source"></select></label>
  <label>step <select id="f-step"></select></label>
  <label>task <select id="f-task"></select></label>
  <label>score <input id="f-score-min" type="number" step="any" placeholder="min"> to
    <input id="f-score-max" type="number" step="any" placeholder="max"></label>
  <label>reason <select id="f-reason"></select></label>
  <label>text <input id="f-q" type="search" placeholder="in prompt, response, answers"></label>
  <label>order <select id="f-order"><option value="">newest step first</option><option value="oldest">oldest step
    first</option><option value="score">lowest score first</option><option value="-score">highest score first</option>
  </select></label>
  <button id="f-reset" type="button">reset</button>
</form>
<details id="summary-box" open><summary>per task, current filter</summary><table id="summary"></table></details>
<nav class="pager" id="pager-top"></nav>
<main id="rows"></main>
<nav class="pager" id="pager-bottom"></nav>
<script type="application/json" id="data">%DATA%</script>
<script>%SCRIPT%</script>
</body></html>
"""

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 1.5em 2em;color:#1d1d1f;background:#fafafa}
h1{font-size:1.3em;margin:.8em 0 .2em;word-break:break-all}
#counts{margin:0 0 .8em;color:#555}
#charts{display:flex;flex-wrap:wrap;gap:1.5em}
.chart h2{font-size:1em;margin:.3em 0}
.chart svg{background:#fff;border:1px solid #ddd}
.chart line.axis{stroke:#999}.chart text{font-size:10px;fill:#555}
.chart polyline{fill:none;stroke-width:1.8}.chart .faded{opacity:.15}
.legend{display:flex;flex-wrap:wrap;gap:.2em .8em;max-width:560px;font-size:12px}
.legend a{cursor:pointer;color:inherit;text-decoration:none}.legend a:hover{text-decoration:underline}
.legend i{display:inline-block;width:10px;height:10px;margin-right:3px;border-radius:2px}
#filters{position:sticky;top:0;z-index:2;background:#fafafa;padding:.6em 0;border-bottom:1px solid #ddd;
  display:flex;flex-wrap:wrap;gap:.5em 1.2em;align-items:center}
#filters select{max-width:22em}#filters input[type=number]{width:5em}
#summary{border-collapse:collapse;margin:.4em 0;font-size:13px}
#summary th,#summary td{padding:.15em .7em;text-align:right;border-bottom:1px solid #eee}
#summary th:first-child,#summary td:first-child{text-align:left}
.pager{margin:.7em 0;display:flex;gap:.6em;align-items:center}
.gen{background:#fff;border:1px solid #ddd;border-left:5px solid #bbb;margin:.7em 0;padding:.5em .7em}
.gen.good{border-left-color:#2a9d55}.gen.bad{border-left-color:#d04040}.gen.part{border-left-color:#e0a020}
.meta{color:#555;font-size:12px;margin-bottom:.4em;display:flex;flex-wrap:wrap;gap:.3em 1em}
.meta b{color:#1d1d1f}
.cols{display:grid;grid-template-columns:minmax(0,2fr) minmax(0,3fr) minmax(0,1.2fr);gap:.8em}
.cols h3{font-size:11px;text-transform:uppercase;letter-spacing:.05em;color:#888;margin:0 0 .2em}
pre{white-space:pre-wrap;word-break:break-word;margin:0;max-height:22em;overflow:auto;background:#f5f5f7;
  padding:.4em;font:12px/1.35 ui-monospace,Menlo,Consolas,monospace}
mark{background:#ffe58a;outline:1px solid #d4a800}
.verdict code{display:block;white-space:pre-wrap;word-break:break-word;background:#f5f5f7;padding:.2em .4em;
  margin-bottom:.5em;font:12px ui-monospace,Menlo,Consolas,monospace}
.none{color:#999;font-style:italic}
@media (max-width:900px){.cols{grid-template-columns:1fr}}
"""

SCRIPT = r"""
(function () {
  "use strict";
  var t0 = performance.now();
  var errors = 0;
  window.addEventListener("error", function () { document.body.dataset.errors = ++errors; });
  var DATA = JSON.parse(document.getElementById("data").textContent);
  document.body.dataset.parseMs = (performance.now() - t0).toFixed(1);
  var ROWS = DATA.rows, PAGE_SIZE = 25, OPEN = "<answer>", CLOSE = "</answer>";
  var FIELDS = ["source", "step", "task", "reason", "score_min", "score_max", "q", "order", "page"];
  var state = {}, matching = [], haystack = null;
  var UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];
  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function stepKey(step) { return step === null ? "-" : String(step); }
  function fmt(x, digits) {
    return x === null || x === undefined ? "-" : (+x).toFixed(digits === undefined ? 2 : digits);
  }

  // ----- filter options, with counts -----
  function counted(key) {
    var counts = new Map();
    for (var i = 0; i < ROWS.length; i++) {
      var v = key === "step" ? stepKey(ROWS[i].step) : ROWS[i][key];
      counts.set(v, (counts.get(v) || 0) + 1);
    }
    return counts;
  }
  function fillSelect(select, counts, order, label) {
    var values = Array.from(counts.keys()).sort(order);
    select.appendChild(new Option("all (" + ROWS.length + ")", ""));
    values.forEach(function (v) {
      var text = label(v);
      if (text.length > 70) text = text.slice(0, 67) + "...";
      var option = new Option(text + " (" + counts.get(v) + ")", v);
      option.title = v;
      select.appendChild(option);
    });
  }
  var byText = function (a, b) { return a < b ? -1 : a > b ? 1 : 0; };
  var byStep = function (a, b) { return (a === "-" ? -1 : +a) - (b === "-" ? -1 : +b); };
  fillSelect($("f-source"), counted("source"), byText, String);
  fillSelect($("f-step"), counted("step"), byStep, function (v) { return v === "-" ? "none" : v; });
  fillSelect($("f-task"), counted("task"), byText, String);
  var reasons = counted("reason");
  fillSelect($("f-reason"), reasons, function (a, b) { return reasons.get(b) - reasons.get(a) || byText(a, b); },
             function (v) { return v === "" ? "(none: the answer was scored)" : v; });
  // an "any" option must differ from the empty reason: "all" is the unset state, the empty reason a value
  $("f-reason").options[0].value = "\u0000any";

  // ----- state <-> URL hash and form -----
  function readHash() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    state = {};
    FIELDS.forEach(function (k) { if (params.has(k)) state[k] = params.get(k); });
  }
  function writeHash() {
    var params = new URLSearchParams();
    FIELDS.forEach(function (k) {
      if (state[k] !== undefined && !(k === "page" && state[k] === "1")) params.set(k, state[k]);
    });
    var hash = params.toString();
    if (hash !== location.hash.replace(/^#/, "")) history.replaceState(null, "", hash ? "#" + hash : location.pathname);
  }
  function setSelect(select, value, unset) {
    var v = value === undefined ? unset : value;
    if (!Array.prototype.some.call(select.options, function (o) { return o.value === v; })) {
      select.appendChild(new Option(v + " (0)", v));  // a value from a link that this page does not hold
    }
    select.value = v;
  }
  function stateToForm() {
    setSelect($("f-source"), state.source, "");
    setSelect($("f-step"), state.step, "");
    setSelect($("f-task"), state.task, "");
    setSelect($("f-reason"), state.reason, "\u0000any");
    setSelect($("f-order"), state.order, "");
    [["f-score-min", "score_min"], ["f-score-max", "score_max"], ["f-q", "q"]].forEach(function (p) {
      if ($(p[0]).value !== (state[p[1]] || "")) $(p[0]).value = state[p[1]] || "";  // keeps the cursor while typing
    });
  }
  function formToState() {
    var next = {};
    [["source", "f-source"], ["step", "f-step"], ["task", "f-task"], ["order", "f-order"]].forEach(function (p) {
      if ($(p[1]).value !== "") next[p[0]] = $(p[1]).value;
    });
    if ($("f-reason").value !== "\u0000any") next.reason = $("f-reason").value;
    if ($("f-score-min").value !== "") next.score_min = $("f-score-min").value;
    if ($("f-score-max").value !== "") next.score_max = $("f-score-max").value;
    if ($("f-q").value !== "") next.q = $("f-q").value;
    state = next;
  }

  // ----- filtering -----
  function text(row) {
    return (row.prompt + "\n" + row.response + "\n" + (row.expected || "") + "\n" + (row.pred || "")).toLowerCase();
  }
  function filter() {
    var lo = state.score_min !== undefined && state.score_min !== "" ? +state.score_min : -Infinity;
    var hi = state.score_max !== undefined && state.score_max !== "" ? +state.score_max : Infinity;
    var q = (state.q || "").toLowerCase();
    if (q && !haystack) haystack = ROWS.map(text);
    matching = [];
    for (var i = 0; i < ROWS.length; i++) {
      var r = ROWS[i];
      if (state.source !== undefined && r.source !== state.source) continue;
      if (state.step !== undefined && stepKey(r.step) !== state.step) continue;
      if (state.task !== undefined && r.task !== state.task) continue;
      if (state.reason !== undefined && r.reason !== state.reason) continue;
      if ((lo !== -Infinity || hi !== Infinity) && (r.score === null || r.score < lo || r.score > hi)) continue;
      if (q && haystack[i].indexOf(q) < 0) continue;
      matching.push(i);
    }
    var order = state.order || "";
    var score = function (i) { return ROWS[i].score === null ? -Infinity : ROWS[i].score; };
    var step = function (i) { return ROWS[i].step === null ? -1 : ROWS[i].step; };
    if (order === "") matching.sort(function (a, b) { return step(b) - step(a) || a - b; });
    else if (order === "score") matching.sort(function (a, b) { return score(a) - score(b) || a - b; });
    else if (order === "-score") matching.sort(function (a, b) { return score(b) - score(a) || a - b; });
  }

  // ----- rendering -----
  function markedResponse(response) {
    // the block envs/answers.py extracts: the innermost complete <answer>...</answer> pair that ends last
    var pre = el("pre", "response");
    var end = response.lastIndexOf(CLOSE);
    while (end >= 0) {
      var start = end >= 0 ? response.lastIndexOf(OPEN, end) : -1;
      if (start >= 0) {
        var close = response.indexOf(CLOSE, start) + CLOSE.length;
        pre.appendChild(document.createTextNode(response.slice(0, start)));
        pre.appendChild(el("mark", null, response.slice(start, close)));
        pre.appendChild(document.createTextNode(response.slice(close)));
        return pre;
      }
      end = end > 0 ? response.lastIndexOf(CLOSE, end - 1) : -1;
    }
    pre.textContent = response || "(empty response)";
    return pre;
  }
  function column(title, child) {
    var div = el("div");
    div.appendChild(el("h3", null, title));
    div.appendChild(child);
    return div;
  }
  function code(value) {
    return value === null || value === undefined ? el("code", "none", "none") : el("code", null, value);
  }
  function card(r) {
    var art = el("article", "gen " + (r.score === null ? "" : r.score >= 1 ? "good" : r.score > 0 ? "part" : "bad"));
    art.dataset.source = r.source; art.dataset.step = stepKey(r.step); art.dataset.task = r.task;
    art.dataset.score = r.score === null ? "" : r.score; art.dataset.reason = r.reason;
    var meta = el("div", "meta");
    [["", r.source], ["step ", r.step === null ? "-" : r.step], ["", r.task],
     ["score ", fmt(r.score, 3)], ["acc ", fmt(r.acc, 0)],
     ["", r.length === null ? "length ?" : r.length + " " + r.unit],
     ["group ", (UUID.test(r.group) ? r.group.slice(0, 8) : r.group) + " #" + r.sample]].forEach(function (p) {
      var span = el("span", null, p[0]);
      span.appendChild(el("b", null, String(p[1])));
      meta.appendChild(span);
    });
    art.appendChild(meta);
    var cols = el("div", "cols");
    var prompt = el("pre", "prompt", r.prompt);
    cols.appendChild(column("prompt", prompt));
    cols.appendChild(column("response", markedResponse(r.response)));
    var verdict = el("div", "verdict");
    verdict.appendChild(el("h3", null, "expected"));
    verdict.appendChild(code(r.expected));
    verdict.appendChild(el("h3", null, "extracted"));
    verdict.appendChild(code(r.pred));
    verdict.appendChild(el("h3", null, "score / reason"));
    verdict.appendChild(el("div", null, fmt(r.score, 3) + (r.reason ? " - " + r.reason : "")));
    cols.appendChild(verdict);
    art.appendChild(cols);
    return {article: art, prompt: prompt};
  }
  function pages() { return Math.max(1, Math.ceil(matching.length / PAGE_SIZE)); }
  function pager(nav) {
    nav.textContent = "";
    var page = +state.page || 1;
    var prev = el("button", null, "< prev"), next = el("button", null, "next >");
    prev.type = next.type = "button";
    prev.disabled = page <= 1; next.disabled = page >= pages();
    prev.onclick = function () { go(page - 1); };
    next.onclick = function () { go(page + 1); };
    var first = matching.length ? (page - 1) * PAGE_SIZE + 1 : 0;
    var last = Math.min(page * PAGE_SIZE, matching.length);
    nav.appendChild(prev);
    nav.appendChild(el("span", null, "page " + page + " of " + pages() + " - rows " + first + "-" + last + " of " +
                           matching.length + " matching"));
    nav.appendChild(next);
  }
  function go(page) { state.page = String(page); render(); window.scrollTo(0, $("filters").offsetTop); }
  function renderRows() {
    var page = Math.min(Math.max(1, Math.floor(+state.page) || 1), pages());
    state.page = String(page);
    var box = $("rows"), prompts = [];
    box.textContent = "";
    var fragment = document.createDocumentFragment();
    matching.slice((page - 1) * PAGE_SIZE, page * PAGE_SIZE).forEach(function (i) {
      var c = card(ROWS[i]);
      fragment.appendChild(c.article);
      prompts.push(c.prompt);
    });
    if (!matching.length) fragment.appendChild(el("p", "none", "no generation matches these filters"));
    box.appendChild(fragment);
    prompts.forEach(function (p) { p.scrollTop = p.scrollHeight; });  // the question sits at the prompt's end
    pager($("pager-top"));
    pager($("pager-bottom"));
  }
  function renderSummary() {
    var by = new Map();
    matching.forEach(function (i) {
      var r = ROWS[i], s = by.get(r.task);
      if (!s) by.set(r.task, s = {n: 0, score: 0, scored: 0, acc: 0, accn: 0, found: 0, foundn: 0, len: 0, lenn: 0});
      s.n++;
      if (r.score !== null) { s.score += r.score; s.scored++; }
      if (r.acc !== null) { s.acc += r.acc; s.accn++; }
      if (r.found !== null) { s.found += r.found; s.foundn++; }
      if (r.length !== null) { s.len += r.length; s.lenn++; }
    });
    var table = $("summary");
    table.textContent = "";
    var head = el("tr");
    ["task", "generations", "mean score", "accuracy", "answer rate", "mean length"].forEach(function (h) {
      head.appendChild(el("th", null, h));
    });
    table.appendChild(head);
    Array.from(by.keys()).sort(byText).forEach(function (task) {
      var s = by.get(task), tr = el("tr");
      [task, s.n, s.scored ? fmt(s.score / s.scored, 3) : "-", s.accn ? fmt(s.acc / s.accn, 3) : "-",
       s.foundn ? fmt(s.found / s.foundn, 3) : "-", s.lenn ? fmt(s.len / s.lenn, 0) : "-"].forEach(function (v) {
        tr.appendChild(el("td", null, String(v)));
      });
      table.appendChild(tr);
    });
  }

  // ----- per-task reward over steps (inline SVG) -----
  var SVG = "http://www.w3.org/2000/svg", taskColor = new Map(), chartLines = [];
  Array.from(counted("task").keys()).sort(byText).forEach(function (task, i) {
    taskColor.set(task, i < COLORS.length ? COLORS[i] : "hsl(" + (i * 137.5) % 360 + ",60%,45%)");
  });
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }
  function drawChart(source, spec) {
    var W = 560, H = 220, L = 40, R = 30, T = 10, B = 26;
    var tasks = Object.keys(spec.tasks), xs = [], ys = [0, 1];
    tasks.forEach(function (t) { spec.tasks[t].forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var sx = function (x) { return L + (x - x0) / ((x1 - x0) || 1) * (W - L - R); };
    var sy = function (y) { return H - B - (y - y0) / ((y1 - y0) || 1) * (H - T - B); };
    var box = el("div", "chart");
    box.appendChild(el("h2", null, spec.title));
    var root = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "data-source": source}, box);
    svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, "class": "axis"}, root);
    svg("line", {x1: L, y1: T, x2: L, y2: H - B, "class": "axis"}, root);
    [y0, (y0 + y1) / 2, y1].forEach(function (y) {
      svg("text", {x: L - 4, y: sy(y) + 3, "text-anchor": "end"}, root).textContent = fmt(y, 2);
    });
    [x0, x1].forEach(function (x) {
      svg("text", {x: sx(x), y: H - B + 14, "text-anchor": "middle"}, root).textContent = "step " + x;
    });
    tasks.forEach(function (task) {
      var points = spec.tasks[task], color = taskColor.get(task) || "#333";
      var g = svg("g", {"data-task": task}, root);
      svg("polyline", {points: points.map(function (p) { return sx(p[0]) + "," + sy(p[1]); }).join(" "),
                       stroke: color}, g);
      if (points.length <= 200) points.forEach(function (p) {
        var dot = svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: color}, g);
        svg("title", {}, dot).textContent = task + " - step " + p[0] + ": " + fmt(p[1], 3) + " over " + p[2];
      });
      chartLines.push(g);
    });
    var legend = el("div", "legend");
    tasks.forEach(function (task) {
      var a = el("a", null, task), swatch = el("i");
      swatch.style.background = taskColor.get(task) || "#333";
      a.insertBefore(swatch, a.firstChild);
      a.title = "show only " + task;
      a.onclick = function () { state.task = task; state.page = "1"; render(); };
      legend.appendChild(a);
    });
    box.appendChild(legend);
    $("charts").appendChild(box);
  }
  function highlightCharts() {
    chartLines.forEach(function (g) {
      g.classList.toggle("faded", state.task !== undefined && g.getAttribute("data-task") !== state.task);
    });
  }

  // ----- wiring -----
  function render() {
    var t = performance.now();
    stateToForm();
    filter();
    document.body.dataset.filterMs = (performance.now() - t).toFixed(1);
    renderSummary();
    renderRows();
    highlightCharts();
    writeHash();
    document.body.dataset.matching = matching.length;
    document.body.dataset.renderMs = (performance.now() - t).toFixed(1);
  }
  function onForm() { formToState(); state.page = "1"; render(); }
  ["f-source", "f-step", "f-task", "f-reason", "f-score-min", "f-score-max", "f-order"].forEach(function (id) {
    $(id).addEventListener("change", onForm);
  });
  var typing = null;
  $("f-q").addEventListener("input", function () { clearTimeout(typing); typing = setTimeout(onForm, 200); });
  $("f-reset").addEventListener("click", function () { state = {}; render(); });
  window.addEventListener("hashchange", function () { readHash(); render(); });

  var sources = counted("source");
  $("counts").textContent = ROWS.length + " generations: " + Array.from(sources.keys()).sort(byText).map(function (s) {
    return s + " " + sources.get(s);
  }).join(", ");
  Object.keys(DATA.series).forEach(function (source) { drawChart(source, DATA.series[source]); });
  readHash();
  render();
  document.body.dataset.loadMs = (performance.now() - t0).toFixed(1);  // this script: parse, charts, first render
  document.body.dataset.readyMs = performance.now().toFixed(1);  // since navigation started: reading the file too
  document.body.dataset.state = "ready";
})();
"""


if __name__ == "__main__":
    sys.exit(main())
