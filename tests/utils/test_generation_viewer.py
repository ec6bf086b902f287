"""Generation dumps (training/trainer/generations.py) and the generation viewer page (utils/generation_viewer/).

Dumps are written by the code that writes them in a run: our training dump through `dump_step` (its TransferQueue read
stubbed), verl's validation dump through verl's own `_write_generations` with envs' real reward dicts, the evaluator's
`generations.jsonl` through its `make_record` and `GenerationStore`. The page is opened in a real headless Chromium
(`apt-get install -y chromium`); those tests skip when no Chromium is installed. A slow test runs the real trainer
on the tiny model and views its dumps.
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

from training.trainer.generations import (
    SUMMARY_FILE,
    DumpSettings,
    dump_step,
    generation_rows,
    pick_groups,
    step_summary,
    write_step_file,
)
from training.trainer.metrics import SampleRecord
from utils import generation_viewer as viewer

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if path), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="needs a headless Chromium on PATH (Debian/Ubuntu: apt-get install -y chromium)")
TASKS = ("chain_sum", "spell_backward", "number_sorting")


# ----- synthetic dumps, written by the real writers -----
def training_records(step: int, groups_per_task: int = 2, n: int = 4) -> tuple[list[str], list[SampleRecord], dict]:
    """(keys, records, {key: fields/prompt/response}) of one step: every task with `groups_per_task` groups of n."""
    keys, records, content = [], [], {}
    for t, task in enumerate(TASKS):
        for g in range(groups_per_task):
            group = f"uid-{step}-{task}-{g}"
            for s in range(n):
                correct = (s + g + step) % 3 == 0
                key = f"{group}_{s}_0"
                answer = f"{task}-answer-{step}-{g}"
                response = (f"<think>step {step}, try {s}</think>\n<answer>{answer if correct else 'wrong'}</answer>"
                            if s != 3 else "I do not know <b>bold</b> </script><script>window.pwned=1</script>")
                keys.append(key)
                records.append(SampleRecord(task, group, float(correct), float(correct), float(s != 3), 10 + s))
                content[key] = ({"extra_info": {"task": task, "entry": {"answer": answer}},
                                 "reward": {"pred": (answer if correct else "wrong") if s != 3 else None,
                                            "reason": "" if s != 3 else "no <answer>...</answer> block"}},
                                f"system\nSolve it.\nuser\nQuestion {task} {g} at step {step}?\nassistant\n", response)
    return keys, records, content


def write_training_dumps(directory: Path, steps: range, groups_per_step: int = 4) -> dict[int, list[str]]:
    """Runs dump_step for each step (TransferQueue read stubbed); returns {step: dumped keys}."""
    settings = DumpSettings(directory=str(directory), every_steps=1, groups_per_step=groups_per_step)
    dumped = {}
    for step in steps:
        keys, records, content = training_records(step)

        def read(wanted, partition_id, tokenizer):
            dumped[step] = list(wanted)
            return ([content[k][0] for k in wanted], [content[k][1] for k in wanted], [content[k][2] for k in wanted])

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("training.trainer.generations.read_generation_fields", read)
            dump_step(settings, step, keys, records, "train", tokenizer=None)
    return dumped


def write_validation_dumps(directory: Path, steps: tuple[int, ...]) -> int:
    """verl's _write_generations with envs' reward dicts on real chain_sum entries, as _validate calls it."""
    import reasoning_gym
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from envs.reward import score_response

    entries = list(reasoning_gym.create_dataset("chain_sum", seed=3, size=4))
    for step in steps:
        responses = [f"<answer>{e['answer']}</answer>" if (i + step) % 2 else "the answer is 12" for i, e in
                     enumerate(entries)]
        results = [score_response(r, e, "chain_sum", response_length=7) for r, e in zip(responses, entries)]
        extra = {"reward": [r["score"] for r in results]}
        for key in results[0]:
            extra[key] = [r[key] for r in results]
        PPOTrainer._write_generations(
            inputs=[f"user\n{e['question']}\nassistant\n" for e in entries], outputs=responses,
            gts=[e["answer"] for e in entries], scores=extra["reward"],
            reward_extra_infos_dict=extra | {"uid": [f"val-{i}_0_0" for i in range(len(entries))]},
            dump_path=str(directory), global_steps=step)
    return len(entries) * len(steps)


def write_eval_generations(path: Path) -> int:
    """The evaluator's generations.jsonl: make_record + GenerationStore on real spell_backward items."""
    import reasoning_gym

    from envs.reward import score_response
    from evaluation.backends.base import Completion
    from evaluation.runner import make_record
    from evaluation.store import GenerationStore
    from evaluation.suite import SuiteItem

    store = GenerationStore(str(path))
    entries = list(reasoning_gym.create_dataset("spell_backward", seed=5, size=3))
    for i, entry in enumerate(entries):
        item = SuiteItem(f"words/spell_backward/{i:05d}", "words", "spell_backward", "spell_backward", entry, {},
                         [{"role": "user", "content": entry["question"]}])
        for sample, text in enumerate([f"<answer>{entry['answer']}</answer>", "<answer>nope</answer>"]):
            scored = score_response(text, entry, "spell_backward")
            store.append(make_record(item, sample, Completion(text, 5, "stop"), scored))
    store.close()
    return len(entries) * 2


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


# ----- the training dump -----
def test_defaults_dump_a_few_groups_and_validation_beside_them():
    from training.launch.config import compose_config

    cfg = compose_config("quickstart", ["trainer.default_local_dir=/runs/x"])
    settings = DumpSettings.from_config(cfg)
    assert settings == DumpSettings(directory="/runs/x/generations/train", every_steps=1, groups_per_step=4)
    assert cfg.trainer.validation_data_dir == "/runs/x/generations/val"
    off = DumpSettings.from_config(compose_config("quickstart", ["env.dump.every_steps=0"]))
    assert not off.enabled and not off.dumps_generations_at(1)
    sparse = DumpSettings("d", every_steps=10, groups_per_step=2)
    assert [s for s in range(1, 40) if sparse.dumps_generations_at(s)] == [1, 11, 21, 31]


def test_contract_verl_dumps_validation_generations_with_reward_fields():
    """The val/ dumps are verl's: _validate writes every generation with our reward dict's keys when the dir is set."""
    import inspect

    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    validate = inspect.getsource(PPOTrainer._validate)
    assert 'val_data_dir = self.config.trainer.get("validation_data_dir", None)' in validate
    assert "reward_extra_infos_dict={" in validate and "dump_path=val_data_dir" in validate
    assert list(inspect.signature(PPOTrainer._write_generations).parameters) == [
        "inputs", "outputs", "gts", "scores", "reward_extra_infos_dict", "dump_path", "global_steps"]


def test_groups_are_picked_round_robin_over_tasks():
    records = [SampleRecord(task, f"{task}{g}", 0.0, 0.0, 0.0, 1.0)
               for task in "bca" for g in range(3) for _ in range(2)]
    assert pick_groups(records, 4) == ["a0", "b0", "c0", "a1"]
    assert len(pick_groups(records, 100)) == 9 and pick_groups(records, 0) == []


def test_dump_step_writes_whole_groups_with_reward_fields_and_a_summary_of_all(tmp_path):
    dumped = write_training_dumps(tmp_path, range(1, 3), groups_per_step=4)
    rows = [json.loads(line) for line in (tmp_path / "1.jsonl").read_text().splitlines()]
    assert len(rows) == 4 * 4 == len(dumped[1])  # four whole groups of four
    assert sorted(r["task"] for r in rows[::4]) == ["chain_sum", "chain_sum", "number_sorting", "spell_backward"]
    assert [r["sample"] for r in rows[:4]] == [0, 1, 2, 3] and len({r["group"] for r in rows[:4]}) == 1
    assert set(rows[0]) == {"step", "group", "sample", "task", "prompt", "response", "ground_truth", "pred", "score",
                            "acc", "answer_found", "format_ok", "truncated", "reason", "response_length"}
    first = rows[0]
    assert first["step"] == 1 and first["prompt"].startswith("system")
    assert first["ground_truth"] == "chain_sum-answer-1-0"
    assert rows[3]["pred"] is None and rows[3]["reason"] == "no <answer>...</answer> block"
    summary = [json.loads(line) for line in (tmp_path / SUMMARY_FILE).read_text().splitlines()]
    assert [s["step"] for s in summary] == [1, 2]
    assert summary[0]["tasks"]["chain_sum"]["samples"] == 8  # every response of the step, not only the dumped ones
    _, records, _ = training_records(1)
    assert summary[0] == step_summary(1, records)


def test_dump_failure_is_logged_not_raised(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    keys, records, _ = training_records(1)
    assert dump_step(DumpSettings(str(blocker / "sub"), 1, 2), 1, keys, records, "train", None) is None
    assert "generation dump of step 1" in caplog.text


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
