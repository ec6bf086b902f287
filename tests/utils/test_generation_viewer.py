"""The generation viewer page (utils/generation_viewer/) on the three dumps a run writes, each written by the code
that writes it in a run (tests/utils/generation_dumps.py; the training dump's own tests:
tests/training/trainer/test_generations.py). The page is opened in a real headless Chromium (`apt-get install -y
chromium`); those tests skip when no Chromium is installed. A slow test runs the real trainer on the tiny model and
views its dumps.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.utils.generation_dumps import TASKS, write_eval_generations, write_training_dumps, write_validation_dumps
from training.trainer.generations import SUMMARY_FILE, generation_rows, write_step_file
from training.trainer.metrics import SampleRecord
from utils import generation_viewer as viewer

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs a headless Chromium on PATH (Debian/Ubuntu: apt-get install -y chromium)")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A training run's folder: generations/train (steps 1-3) and generations/val (steps 0 and 3)."""
    run = tmp_path_factory.mktemp("run")
    write_training_dumps(run / "generations" / "train", range(1, 4))
    write_validation_dumps(run / "generations" / "val", (0, 3))
    (run / "global_step_3" / "actor").mkdir(parents=True)  # a checkpoint folder: not searched
    (run / "global_step_3" / "actor" / "7.jsonl").write_text('{"input": "x", "output": "y"}\n')
    return run


@pytest.fixture(scope="module")
def eval_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("eval") / "generations.jsonl"
    write_eval_generations(path)
    return path


# ----- reading the three formats -----
def test_viewer_reads_training_validation_and_evaluator_dumps(run_dir, eval_file):
    assert not any("global_step" in str(p) for p in viewer.find_files(run_dir))
    rows, summaries = viewer.load([run_dir, eval_file])
    by_source = {s: [r for r in rows if r["source"] == s] for s in ("train", "val", "eval")}
    assert {s: len(v) for s, v in by_source.items()} == {"train": 3 * 16, "val": 8, "eval": 6}
    assert len(rows) == 3 * 16 + 8 + 6 and sorted(summaries) == [1, 2, 3]
    train = by_source["train"][0]
    assert train["expected"].startswith(train["task"]) and train["length"] >= 10 and train["unit"] == "tokens"
    val = by_source["val"]
    assert {r["task"] for r in val} == {"chain_sum"} and {r["step"] for r in val} == {0, 3}
    assert {r["reason"] for r in val} == {"", "no <answer>...</answer> block"}  # envs' reward fields, via verl
    assert all(r["expected"] is not None and r["sample"] == 0 for r in val)
    correct = [r for r in val if r["score"] == 1.0]
    assert correct and all(r["pred"] == r["expected"] for r in correct)
    ev = by_source["eval"]
    assert {r["task"] for r in ev} == {"words/spell_backward"} and {r["step"] for r in ev} == {None}
    assert sorted(r["score"] for r in ev) == [0.0] * 3 + [1.0] * 3 and {r["sample"] for r in ev} == {0, 1}
    series = viewer.reward_series(rows, summaries)
    assert set(series) == {"train", "val"}  # eval has one point per task: no chart
    assert [p[0] for p in series["train"]["tasks"]["chain_sum"]] == [1, 2, 3]
    assert series["train"]["tasks"]["chain_sum"][0][2] == 8 and "every response" in series["train"]["title"]


def test_page_embeds_data_safely(tmp_path):
    rows = [viewer.normalize({"prompt": "p", "response": "</script><!-- \ud800", "step": 1, "task": "t"},
                             tmp_path / "1.jsonl", 100)]
    page = viewer.build_page(rows, {}, "title </script>")
    data = page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and json.loads(data)["rows"][0]["response"] == "</script><!-- \ud800"
    page.encode("utf-8")  # the lone surrogate is escaped, not written
    assert viewer.normalize({"prompt": "p", "response": "x" * 50}, tmp_path / "1.jsonl", 10)["response"].startswith(
        "x" * 10 + "\n[... 40 more characters")


def test_command_line(run_dir, tmp_path, capsys):
    assert viewer.main([str(run_dir), "-o", str(tmp_path / "page.html")]) == 0
    assert "wrote" in capsys.readouterr().out and (tmp_path / "page.html").stat().st_size > 10_000
    (tmp_path / "empty").mkdir()
    assert viewer.main([str(tmp_path / "empty"), "-o", str(tmp_path / "x.html")]) == 1
    assert viewer.main([str(tmp_path / "missing"), "-o", str(tmp_path / "x.html")]) == 2
    done = subprocess.run([sys.executable, "-m", "utils.generation_viewer", "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "RUN_OR_FILE" in done.stdout


# ----- the page in a real browser -----
class PageDom(HTMLParser):
    """The rendered page's <body> attributes, row <article>s, the <mark>s and any other tag inside <pre> blocks."""

    def __init__(self, text: str):
        super().__init__()
        self.body, self.rows, self.marks, self.tags_in_pre = {}, [], [], []
        self._pre, self._mark = 0, None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "body":
            self.body = dict(attrs)
        elif tag == "article":
            self.rows.append(dict(attrs))
        elif tag == "pre":
            self._pre += 1
        elif self._pre and tag == "mark":
            self._mark = ""
        elif self._pre:
            self.tags_in_pre.append(tag)

    def handle_endtag(self, tag):
        if tag == "pre" and self._pre:
            self._pre -= 1
        elif tag == "mark" and self._mark is not None:
            self.marks.append(self._mark)
            self._mark = None

    def handle_data(self, data):
        if self._mark is not None:
            self._mark += data


def browse(page: Path, fragment: str, profile: Path, screenshot: Path | None = None
           ) -> tuple[PageDom, list[str], float]:
    """Opens file://page#fragment in headless Chromium; returns (DOM after the script ran, console lines, seconds)."""
    cmd = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--hide-scrollbars",
           "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", "--window-size=1400,1700"]
    cmd += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
    start = time.perf_counter()
    done = subprocess.run([*cmd, f"{page.resolve().as_uri()}#{fragment}"], capture_output=True, text=True,
                          timeout=180)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    return PageDom(done.stdout), console, seconds


@pytest.fixture(scope="module")
def page(run_dir, eval_file, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("page") / "page.html"
    assert viewer.main([str(run_dir), str(eval_file), "-o", str(path)]) == 0
    return path


@needs_chromium
def test_browser_harness_sees_script_errors(tmp_path):
    broken = tmp_path / "broken.html"
    broken.write_text("<html><body><script>console.error('boom'); undefinedFunction();</script></body></html>")
    _, console, _ = browse(broken, "", tmp_path / "profile")
    assert len(console) == 2 and "boom" in console[0] and "undefinedFunction" in console[1]


@needs_chromium
def test_page_renders_without_console_errors(page, tmp_path):
    dom, console, _ = browse(page, "", tmp_path / "profile")
    assert console == [] and dom.body.get("data-state") == "ready" and "data-errors" not in dom.body
    assert dom.body["data-matching"] == str(3 * 16 + 8 + 6) and len(dom.rows) == 25  # one page in the DOM
    assert [int(r["data-step"]) for r in dom.rows] == sorted((int(r["data-step"]) for r in dom.rows), reverse=True)
    # model text is text: the <b> and </script><script> of a response neither became elements nor ran
    assert dom.tags_in_pre == []
    assert dom.marks and all(m.startswith("<answer>") and m.endswith("</answer>") for m in dom.marks)


@needs_chromium
@pytest.mark.parametrize("fragment, expected", [
    ("task=spell_backward&source=train", lambda r: r["source"] == "train" and r["task"] == "spell_backward"),
    ("step=3&score_min=1", lambda r: r["step"] == 3 and r["score"] >= 1),
    ("source=val&reason=", lambda r: r["source"] == "val" and r["reason"] == ""),
    ("reason=no%20%3Canswer%3E...%3C%2Fanswer%3E%20block", lambda r: r["reason"] == "no <answer>...</answer> block"),
    ("step=-&score_max=0.5", lambda r: r["step"] is None and r["score"] <= 0.5),
    ("q=question%20number_sorting%201", lambda r: "question number_sorting 1" in r["prompt"].lower()),
    ("task=no_such_task", lambda r: False),
])
def test_filters_from_the_url_hash(page, run_dir, eval_file, tmp_path, fragment, expected):
    rows, _ = viewer.load([run_dir, eval_file])
    want = [r for r in rows if expected(r)]
    dom, console, _ = browse(page, fragment, tmp_path / "profile")
    assert console == [] and dom.body["data-state"] == "ready"
    assert int(dom.body["data-matching"]) == len(want)
    assert len(dom.rows) == min(25, len(want))
    shown = {(r["data-source"], r["data-step"], r["data-task"]) for r in dom.rows}
    assert shown <= {(r["source"], "-" if r["step"] is None else str(r["step"]), r["task"]) for r in want}


@needs_chromium
def test_screenshot_shows_rows(page, tmp_path):
    shot = tmp_path / "page.png"
    _, console, _ = browse(page, "order=score", tmp_path / "profile", screenshot=shot)
    assert console == [] and shot.stat().st_size > 20_000
    print(f"screenshot: {shot}")


def large_run(directory: Path, generations: int, per_step: int = 100) -> None:
    """`generations` training rows in the real dump format: ~2.5 kB each (prompt ~1 kB, response ~1.5 kB)."""
    rng = random.Random(0)
    words = "the of sum total carry digit answer think step check list sort reverse letter count".split()
    for step in range(1, generations // per_step + 1):
        records, fields, prompts, responses = [], [], [], []
        for i in range(per_step):
            task = TASKS[i % len(TASKS)] + str(i % 7)
            score = float(rng.random() < step / (generations / per_step))
            records.append(SampleRecord(task, f"g{step}-{i // 8}", score, score, 1.0, rng.randint(50, 400)))
            fields.append({"extra_info": {"entry": {"answer": str(i)}}, "reward": {"pred": str(i), "reason": ""}})
            prompts.append("system\n" + " ".join(rng.choices(words, k=180)) + f"\nuser\nQuestion {i}?\nassistant\n")
            responses.append("<think>" + " ".join(rng.choices(words, k=250)) + f"</think>\n<answer>{i}</answer>")
        write_step_file(str(directory), step, generation_rows(step, records, fields, prompts, responses))


@needs_chromium
@pytest.mark.slow
@pytest.mark.serial  # page timings
def test_ten_thousand_generations_load_and_filter_quickly(tmp_path):
    large_run(tmp_path / "generations" / "train", 10_000)
    start = time.perf_counter()
    assert viewer.main([str(tmp_path), "-o", str(tmp_path / "big.html")]) == 0
    build_s = time.perf_counter() - start
    size_mb = (tmp_path / "big.html").stat().st_size / 1e6
    print(f"\n10k generations: build {build_s:.2f} s, page {size_mb:.1f} MB (times in ms; wall includes --dump-dom "
          "writing the 27 MB DOM)")
    timings = {}
    for name, fragment in [("all", ""), ("task+step", "task=chain_sum0&step=77"), ("text", "q=question%204%3F"),
                           ("score order", "order=score&score_max=0")]:
        dom, console, wall = browse(tmp_path / "big.html", fragment, tmp_path / "profile")
        assert console == [] and dom.body["data-state"] == "ready" and len(dom.rows) > 0
        timings[name] = {key: float(dom.body[f"data-{key}-ms"])
                         for key in ("parse", "filter", "render", "load", "ready")}
        print(f"  {name:12s} " + ", ".join(f"{key} {ms:5.0f}" for key, ms in timings[name].items()) +
              f", matching {dom.body['data-matching']}, chromium wall {wall:.1f} s")
    # ready: from navigation start (reading the file included) to the first page of filtered rows on screen
    assert all(t["ready"] < 5000 and t["filter"] < 500 and t["render"] < 1000 for t in timings.values()), timings


# ----- the real trainer -----
@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(900)
def test_real_training_run_dumps_and_views(tmp_path):
    """Two GRPO steps on the tiny model (CPU backend) with validation: train and val dumps, viewed in one page.
    (`extended`: in CI the train dump of every test_shipped_configs.py launch is read by the viewer.)"""
    run = tmp_path / "ckpt"
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", "model=tiny", "trainer.device=cpu",
           "data.train_batch_size=2", "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
           "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
           "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8", "data.max_prompt_length=768",
           "data.max_response_length=24", "env.validation_size=4", "trainer.total_training_steps=2",
           "trainer.save_freq=-1", "trainer.test_freq=2", "trainer.val_before_train=false", "trainer.logger=[console]",
           "env.dump.groups_per_step=1", "env.console=verbose", f"trainer.default_local_dir={run}", f"hydra.run.dir={tmp_path / 'hydra'}"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    train_dir, val_dir = run / "generations" / "train", run / "generations" / "val"
    assert sorted(p.name for p in train_dir.iterdir()) == ["1.jsonl", "2.jsonl", SUMMARY_FILE]
    assert sorted(p.name for p in val_dir.iterdir()) == ["2.jsonl"]
    for step in (1, 2):
        rows = [json.loads(line) for line in (train_dir / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 4 and len({r["group"] for r in rows}) == 1 and [r["sample"] for r in rows] == [0, 1, 2, 3]
        assert all(r["step"] == step and r["prompt"].rstrip().endswith("assistant") and r["ground_truth"] is not None
                   and 0 < r["response_length"] <= 24 and isinstance(r["reason"], str) for r in rows)
    summary = [json.loads(line) for line in (train_dir / SUMMARY_FILE).read_text().splitlines()]
    assert [s["step"] for s in summary] == [1, 2]
    assert all(sum(t["samples"] for t in s["tasks"].values()) == 8 for s in summary)
    metrics = re.findall(r"timing/generation_dump:([0-9.e-]+)", done.stdout + done.stderr)
    assert len(metrics) == 2 and max(map(float, metrics)) < 1.0
    rows, summaries = viewer.load([run])
    assert {r["source"] for r in rows} == {"train", "val"} and len(rows) == 8 + 4 and sorted(summaries) == [1, 2]
    assert all(r["task"] != "unknown" and r["expected"] is not None for r in rows)
    if CHROMIUM:
        assert viewer.main([str(run), "-o", str(tmp_path / "run.html")]) == 0
        dom, console, _ = browse(tmp_path / "run.html", "source=val", tmp_path / "profile")
        assert console == [] and dom.body["data-matching"] == "4" and len(dom.rows) == 4
