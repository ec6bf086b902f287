"""External benchmarks in an eval suite (evaluation/benchmark_config.py, evaluation/benchmarks.py): lm-eval's real
engine and task files on the tiny model, reading small local files in GSM8K's, MATH's and MMLU-Pro's formats
(tests/evaluation/data/benchmarks/, written for these tests); bad input named before any model loads."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from evaluation import benchmarks
from evaluation.config import ConfigError, config_from_dict, load_config
from evaluation.runner import run_evaluation

DATA = Path(__file__).parent / "data" / "benchmarks"
TASKS = {"gsm8k": {"task": "gsm8k_cot_llama", "data_files": str(DATA / "gsm8k.jsonl"), "num_fewshot": 0},
         "math": {"task": "hendrycks_math_algebra", "data_files": str(DATA / "math_algebra.jsonl")},
         "mmlu_pro": {"task": "mmlu_pro_math", "data_files": str(DATA / "mmlu_pro_math.jsonl"), "num_fewshot": 0}}


def suite(model, **benchmarks_section) -> dict:
    return {"model": {"path": str(model), "backend": "hf"}, "sampling": {"temperature": 0.0, "n": 1, "max_tokens": 8},
            "suite": {"size": 2, "categories": {"arithmetic": {"tasks": {"basic_arithmetic": {}}}},
                      "benchmarks": {"limit": 3, "tasks": TASKS, **benchmarks_section}}}


@pytest.mark.parametrize("change, message", [
    ({"limt": 3}, "unknown key 'suite.benchmarks.limt'; did you mean limit"),
    ({"tasks": {"gsm8k": {"data_files": "no/such.jsonl"}}}, "'suite.benchmarks.tasks.gsm8k.data_files': no/such.jsonl "
                                                            "does not exist"),
    ({"tasks": {"gsm8k": {"data_files": {"dev": str(DATA / "gsm8k.jsonl")}}}}, "unknown split ['dev']"),
    ({"tasks": {"gsm8k": {"num_fewshot": -1}}}, "'suite.benchmarks.tasks.gsm8k.num_fewshot' must be a non-negative"),
    ({"group": "arithmetic"}, "suite item group 'arithmetic' is defined twice"),
    ({"tasks": {}}, "'suite.benchmarks.tasks' is empty"),
])
def test_a_bad_benchmarks_section_is_named_with_its_key(change, message, tiny_model_dir):
    with pytest.raises(ConfigError) as err:
        config_from_dict(suite(tiny_model_dir, **change), "suite.yaml")
    assert message in str(err.value)


def never_load(*_):
    raise AssertionError("a model was loaded before the bad input was named")


@pytest.mark.parametrize("task, fix", [
    ({"task": "gsm8k_cot_lama"}, "'gsm8k_cot_lama' is not an lm-eval task or group; did you mean gsm8k_cot_llama"),
    ({"task": "gsm8k_cot_llama"}, "lm-eval could not load gsm8k_cot_llama"),  # the hub's data set, offline
    ({**TASKS["gsm8k"], "filter": "strict"}, "filter 'strict' is not one of this task's: strict-match, "
                                             "flexible-extract"),
    ({"task": "hendrycks_math", "data_files": str(DATA / "math_algebra.jsonl")}, "hendrycks_math is a group"),
])
def test_bad_tasks_are_named_before_any_model_loads(task, fix, tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(benchmarks, "build_lm", never_load)
    monkeypatch.setattr("evaluation.runner.build_backend", never_load)
    cfg = config_from_dict(suite(tiny_model_dir, tasks={"gsm8k": task}), "suite.yaml")
    with pytest.raises(ConfigError) as err:
        run_evaluation(cfg, str(tmp_path))
    assert fix in str(err.value) and "suite.benchmarks.tasks.gsm8k" in str(err.value)
    if "could not load" in fix:
        assert "give its data_files" in str(err.value) and "HF_DATASETS_CACHE" in str(err.value)


def test_a_task_file_that_does_not_parse_is_named(tiny_model_dir, tmp_path, monkeypatch):
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "mine.yaml").write_text("task: mine\ndoc_to_text: [unclosed\n")
    monkeypatch.setattr(benchmarks, "build_lm", never_load)
    cfg = config_from_dict(suite(tiny_model_dir, include_path=str(tmp_path / "tasks")), "suite.yaml")
    with pytest.raises(ConfigError) as err:
        run_evaluation(cfg, str(tmp_path / "out"))
    assert f"{tmp_path / 'tasks' / 'mine.yaml'} does not parse as an lm-eval task file" in str(err.value)


def test_lm_evals_engine_rows_pair_by_document_stay_out_of_the_overall_row_and_resume(tiny_model_dir, tmp_path,
                                                                                         monkeypatch):
    """lm-eval's own engine (its hf model, task files and scoring): one record per document, whose accuracy is
    lm-eval's own per-document metric (their mean is the aggregate lm-eval reports); the benchmark group stays out of
    the overall row; an interrupted task resumes from lm-eval's response cache without asking the model again."""
    asked = []
    real_build = benchmarks.build_lm

    def counting_build(model):
        lm = real_build(model)
        generate = lm.generate_until
        lm.generate_until = lambda requests, *a, **k: (asked.extend(requests), generate(requests, *a, **k))[1]
        return lm

    monkeypatch.setattr(benchmarks, "build_lm", counting_build)
    cfg = config_from_dict(suite(tiny_model_dir), "suite.yaml")
    out = tmp_path / "out"
    results = run_evaluation(cfg, str(out))
    assert len(asked) == 9 and results["run"]["complete"]
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    ids = sorted(r["item_id"] for r in records if r["group"] == "external")
    assert ids == [f"external/{key}/{doc:05d}" for key in ("gsm8k", "math", "mmlu_pro") for doc in range(3)]
    lm_eval_own = json.loads((out / "benchmarks.json").read_text())
    for key, metric in (("gsm8k", "exact_match,strict-match"), ("math", "exact_match,none"),
                        ("mmlu_pro", "exact_match,custom-extract")):
        assert results["tasks"][f"external/{key}"]["accuracy"] == lm_eval_own[key]["results"][metric]
    gsm = [r for r in records if r["task_key"] == "gsm8k"]
    assert [r["answer"] for r in gsm] == ["48", "11", "32"]  # the task file's doc_to_target on our local file
    assert results["groups"]["external"]["kind"] == "benchmark"
    assert results["overall"]["n_items"] == 2  # Reasoning Gym's two items: benchmarks inform, apart
    assert "| **overall** | without external |" in (out / "results.md").read_text()
    # an interrupted run: gsm8k's records lost, its responses in lm-eval's cache -> nothing asked, the same records
    kept = [line for line in (out / "generations.jsonl").read_text().splitlines() if '"task_key": "gsm8k"' not in line]
    (out / "generations.jsonl").write_text("\n".join(kept) + "\n")
    asked.clear()
    again = run_evaluation(cfg, str(out))
    assert asked == [] and again["run"]["complete"]
    redone = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert [r["response"] for r in redone if r["task_key"] == "gsm8k"] == [r["response"] for r in gsm]


def test_the_external_math_suite_names_tasks_lm_eval_knows(repo):
    """configs/eval/external_math.yaml: the reference's Reasoning Gym maths tasks, GSM8K, MATH and MMLU-Pro by lm-eval's
    standard task names (their data come from the hub on a machine that reaches it)."""
    cfg = load_config(str(repo / "configs" / "eval" / "external_math.yaml"), ["model.path=MODEL"])
    names = [t.task for t in cfg.benchmarks.tasks]
    assert names == ["gsm8k_cot_llama", "hendrycks_math", "mmlu_pro"]
    assert benchmarks.unknown_tasks(cfg.benchmarks) == []
    mix = yaml.safe_load((repo / "configs" / "mix" / "external_math.yaml").read_text())
    assert sorted(t.task for c in cfg.categories for t in c.tasks) == sorted(mix["tasks"])


def test_a_task_file_in_reasoning_gyms_lmeh_style_runs_through_the_include_path(tiny_model_dir, tmp_path):
    """Reasoning Gym's training/evaluations/lmeh files are plain lm-eval task files with a chat prompt written into
    doc_to_text, regex filters and inline few-shot samples: one of that shape (written here) runs as it is."""
    folder = tmp_path / "lmeh"
    folder.mkdir()
    (folder / "gsm8k_chat_rg_style.yaml").write_text(yaml.safe_dump({
        "task": "gsm8k_chat_rg_style", "dataset_path": "openai/gsm8k", "dataset_name": "main", "test_split": "test",
        "output_type": "generate_until", "num_fewshot": 1,
        "doc_to_text": "<|im_start|>user\nProblem: {{question}}\nEnd with \"The final answer is N\".<|im_end|>\n"
                       "<|im_start|>assistant\n",
        "doc_to_target": "{{answer.split('####')[-1].strip() if answer is defined else target}}",
        "fewshot_config": {"sampler": "first_n", "samples": [{"question": "What is 1 + 1?",
                                                                "target": "1 + 1 = 2. The final answer is 2"}]},
        "filter_list": [{"name": "strict-match", "filter": [
            {"function": "regex", "regex_pattern": "The final answer is (-?[0-9]+)", "group_select": -1},
            {"function": "take_first"}]}],
        "generation_kwargs": {"until": ["<|im_end|>", "</answer>"], "do_sample": False},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0}}))
    tasks = {"rg_gsm8k": {"task": "gsm8k_chat_rg_style", "data_files": str(DATA / "gsm8k.jsonl"),
                          "apply_chat_template": False}}
    cfg = config_from_dict(suite(tiny_model_dir, include_path=str(folder), tasks=tasks), "suite.yaml")
    results = run_evaluation(cfg, str(tmp_path / "out"))
    assert results["tasks"]["external/rg_gsm8k"]["n_items"] == 3 and results["run"]["complete"]
    record = json.loads((tmp_path / "out" / "generations.jsonl").read_text().splitlines()[-1])
    assert record["answer"] == "32" and record["metadata"] == {"filter": "strict-match", "metric": "exact_match"}


class ChatServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint that answers GSM8K questions it knows: right for all but the third."""

    ANSWERS = {"6 trays": "48", "15 marbles": "11", "23 people": "99"}  # the third's gold is 32

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][-1]["content"]
        answer = next((a for key, a in self.ANSWERS.items() if key in question), "0")
        data = json.dumps({"choices": [{"message": {"content": f"Working. The final answer is {answer}"},
                                        "finish_reason": "stop", "index": 0}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_served_model_is_scored_by_lm_evals_own_metric_per_document(tmp_path):
    """model.backend openai: lm-eval's local-chat-completions model against a server; its right answers count 1,
    its wrong one 0, document by document."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), ChatServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        raw = suite("served", tasks={"gsm8k": TASKS["gsm8k"]})
        raw["model"] = {"backend": "openai", "path": "served", "base_url": f"http://127.0.0.1:{server.server_port}/v1",
                        "max_concurrency": 1}
        del raw["suite"]["categories"]
        results = run_evaluation(config_from_dict(raw, "suite.yaml"), str(tmp_path))
    finally:
        server.shutdown()
    records = [json.loads(line) for line in (tmp_path / "generations.jsonl").read_text().splitlines()]
    assert [(r["pred"], r["accuracy"]) for r in records] == [("48", 1.0), ("11", 1.0), ("99", 0.0)]
    assert results["tasks"]["external/gsm8k"]["accuracy"] == pytest.approx(2 / 3)
