"""reasoning-gym's eval YAML schema run by our evaluator: translation, console notes, errors, their result layout.

The YAMLs are written here in their schema (flat keys, `categories: [{category, datasets: [...]}]`), not copied.
"""

import json
from pathlib import Path

import pytest
import yaml

from evaluation.config import ConfigError, load_config
from evaluation.evaluate_model import main
from evaluation.reference_output import reference_results
from evaluation.runner import run_evaluation
from evaluation.suite import build_suite
from tests.evaluation.test_evaluate_model import ScriptedBackend


def their_yaml(tmp_path: Path, **changes) -> Path:
    """An eval file in reasoning-gym's schema: two categories, one dataset listed twice, one without size/seed."""
    raw = {"model_path": "Qwen/Qwen2.5-3B-Instruct", "max_tokens": 24, "temperature": 0.7, "top_p": 0.95,
           "dtype": "float32", "developer_prompt": "DeepSeekZero", "developer_role": "system",
           "output_dir": str(tmp_path / "results"), "save_metadata": True, "save_full_results": True,
           "eval_repeats": 2,
           "categories": [
               {"category": "arithmetic", "datasets": [
                   {"dataset": "chain_sum", "size": 3, "seed": 5, "params": {"min_terms": 2, "max_terms": 3}},
                   {"dataset": "chain_sum", "size": 2, "seed": 5, "params": {"min_terms": 4, "max_terms": 4}}]},
               {"category": "algorithmic", "datasets": [{"dataset": "spell_backward"}]}]}
    return changed_yaml(tmp_path / "eval_mine_composite.yaml", raw, changes)


def changed_yaml(path: Path, raw: dict, changes: dict) -> Path:
    """Writes `raw` with `changes` to `path` as YAML: a key changed to None is removed."""
    raw = {**raw, **changes}
    for key in [k for k, v in changes.items() if v is None]:
        raw.pop(key)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_every_key_maps_to_ours(tmp_path):
    cfg = load_config(str(their_yaml(tmp_path)))
    assert cfg.model.path == "Qwen/Qwen2.5-3B-Instruct" and cfg.model.dtype == "float32"
    assert (cfg.sampling.max_tokens, cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.n) == (24, 0.7, 0.95, 2)
    assert cfg.pass_k == [1, 2] and cfg.system_prompt == "DeepSeekZero"
    arith, algo = cfg.categories
    assert [(t.key, t.task, t.size, t.seed, t.config) for t in arith.tasks] == [
        ("chain_sum", "chain_sum", 3, 5, {"min_terms": 2, "max_terms": 3}),
        ("chain_sum_2", "chain_sum", 2, 5, {"min_terms": 4, "max_terms": 4})]
    assert [(t.task, t.size, t.seed) for t in algo.tasks] == [("spell_backward", 100, 42)]
    assert cfg.reference.output_dir == str(tmp_path / "results")
    lines = cfg.reference.console_lines()
    for key in ("model_path", "max_tokens", "temperature", "top_p", "dtype", "developer_prompt", "developer_role",
                "output_dir", "save_metadata", "save_full_results", "eval_repeats", "categories"):
        assert sum(line.strip().startswith(f"{key} -> ") for line in lines) == 1, key
    assert not [line for line in lines if "ignored" in line]


def test_other_role_is_ignored_by_name_and_no_prompt_means_no_system_message(tmp_path):
    cfg = load_config(str(their_yaml(tmp_path, developer_role="developer")))
    ignored = [line for line in cfg.reference.console_lines() if line.strip().startswith("ignored")]
    assert len(ignored) == 1 and "developer_role: developer" in ignored[0] and "system role" in ignored[0]
    bare = load_config(str(their_yaml(tmp_path, developer_prompt=None)), ["suite.size=1"])
    items = build_suite(bare)
    assert all(item.messages[0]["role"] == "user" for item in items)  # as theirs: no developer_prompt, no system
    with_prompt = build_suite(load_config(str(their_yaml(tmp_path))))
    assert with_prompt[0].messages[0]["role"] == "system"


def test_overrides_by_their_names_and_ours(tmp_path):
    cfg = load_config(str(their_yaml(tmp_path)), ["eval_repeats=4", "model.path=/models/mine", "sampling.seed=3"])
    assert cfg.sampling.n == 4 and cfg.pass_k == [1, 4] and cfg.model.path == "/models/mine"
    assert cfg.sampling.seed == 3


@pytest.mark.parametrize("changes, match", [
    ({"eval_repeat": 3}, "unknown key 'eval_repeat' in a reasoning-gym eval config; did you mean eval_repeats"),
    ({"categories": [{"category": "x", "datasets": [{"dataset": "chain_sum", "parms": {}}]}]},
     r"unknown key 'categories\[0\].datasets\[0\].parms'"),
    ({"categories": [{"category": "x", "datasets": [{"dataset": "chain_summ"}]}]}, "chain_summ"),
    ({"categories": [{"name": "x"}]}, r"'categories\[0\]' needs 'category: NAME'"),
    ({"eval_repeats": 0}, "'eval_repeats' must be an integer >= 1"),
])
def test_bad_reference_files_name_file_and_key(tmp_path, changes, match):
    path = their_yaml(tmp_path, **changes)
    with pytest.raises(ConfigError, match=match) as err:
        load_config(str(path))
    assert str(path) in str(err.value)


def test_reference_layout_is_exact_with_a_scripted_backend(tmp_path):
    """Sample 0 right, sample 1 wrong: every question has best 1.0, mean 0.5; datasets average 0.5."""
    cfg = load_config(str(their_yaml(tmp_path)), ["suite.size=2"])
    run_evaluation(cfg, str(tmp_path / "ours"), backend=ScriptedBackend(build_suite(cfg)))
    records = [json.loads(line) for line in (tmp_path / "ours" / "generations.jsonl").read_text().splitlines()]
    from datetime import datetime

    out = reference_results(cfg, records, datetime(2025, 1, 2, 3, 4, 5), 12.5)
    assert out["metadata"] == {"timestamp": "2025-01-02T03:04:05", "model": "Qwen/Qwen2.5-3B-Instruct",
                               "device": "vllm", "duration_seconds": 12.5, "max_tokens": 24, "temperature": 0.7,
                               "top_p": 0.95, "eval_repeats": 2}
    assert [c["name"] for c in out["categories"]] == ["arithmetic", "algorithmic"]
    first = out["categories"][0]["datasets"][0]
    assert first["name"] == "chain_sum" and first["category"] == "arithmetic" and first["total_examples"] == 3
    assert first["config"] == {"min_terms": 2, "max_terms": 3, "size": 3, "seed": 5}
    assert first["average_score"] == 0.5
    question = first["results"][0]
    assert question["best_score"] == 1.0 and question["mean_score"] == 0.5
    assert [c["score"] for c in question["completions"]] == [1.0, 0.0]
    assert question["completions"][0]["model_answer"] == question["expected_answer"]
    assert question["completions"][1]["model_answer"] == "nope"
    assert out["categories"][1]["datasets"][0]["total_examples"] == 2  # suite.size=2 overrides the default 100
    cfg.reference.save_full_results = cfg.reference.save_metadata = False
    slim = reference_results(cfg, records, datetime(2025, 1, 2), 1.0)
    assert "metadata" not in slim and "results" not in slim["categories"][0]["datasets"][0]


def test_cli_runs_their_file_on_the_tiny_model(tiny_model_dir, tmp_path, capsys):
    path = their_yaml(tmp_path, max_tokens=8, categories=[{"category": "arithmetic", "datasets": [
        {"dataset": "chain_sum", "size": 3, "seed": 42}]}])
    argv = ["--config", str(path), "--model", str(tiny_model_dir), "--backend", "hf", "--reference-output"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "reasoning-gym eval config, translated:" in printed and "eval_repeats -> sampling.n" in printed
    ours = tmp_path / "results" / "eval_mine_composite" / tiny_model_dir.name
    results = json.loads((ours / "results.json").read_text())
    assert results["run"]["model"] == str(tiny_model_dir) and results["overall"]["n_samples"] == 6
    [theirs] = list((tmp_path / "results").glob("local_*/results.json"))
    data = json.loads(theirs.read_text())
    assert data["metadata"]["model"] == str(tiny_model_dir) and data["metadata"]["eval_repeats"] == 2
    dataset = data["categories"][0]["datasets"][0]
    assert dataset["total_examples"] == 3 and len(dataset["results"][0]["completions"]) == 2
    assert dataset["average_score"] == pytest.approx(results["tasks"]["arithmetic/chain_sum"]["accuracy"])
    # a rerun resumes: nothing generated again
    assert main(argv[:-1]) == 0
    assert json.loads((ours / "results.json").read_text())["run"]["generated_samples"] == 0


def test_our_suites_write_their_layout_too(tmp_path):
    """--reference-output on one of our suites: categories as theirs, a composite as a category of its members."""
    from datetime import datetime

    from tests.evaluation.test_evaluate_model import SMOKE

    cfg = load_config(SMOKE, ["model.path=unused", "sampling.n=2"])
    run_evaluation(cfg, str(tmp_path), backend=ScriptedBackend(build_suite(cfg)))
    records = [json.loads(line) for line in (tmp_path / "generations.jsonl").read_text().splitlines()]
    out = reference_results(cfg, records, datetime(2025, 1, 1), 1.0)
    names = [c["name"] for c in out["categories"]]
    assert names == ["arithmetic", "algorithmic", "mixed"]
    mixed = out["categories"][2]["datasets"]
    assert {d["name"] for d in mixed} <= {"chain_sum", "letter_counting"}
    assert sum(d["total_examples"] for d in mixed) == 4 and all(d["average_score"] == 0.5 for d in mixed)
    assert out["metadata"]["eval_repeats"] == 2


def test_their_command_line_flags_category_batch_size_device_verbose(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """reasoning-gym's `--category --batch-size --device --verbose` work: one category evaluated, the batch size and
    the device applied (as CUDA_VISIBLE_DEVICES, before torch loads), --verbose named; a wrong category or device
    exits 2 naming what exists."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # recorded, so teardown restores the caller's value ...
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")  # ... and --device cpu starts from none
    path = their_yaml(tmp_path, max_tokens=4, eval_repeats=1)
    argv = ["--config", str(path), "--model", str(tiny_model_dir), "--backend", "hf",
            "--output-dir", str(tmp_path / "o")]
    assert main([*argv, "--category", "algorithmic", "--batch-size", "3", "--device", "cpu", "--verbose"]) == 0
    printed = capsys.readouterr().out
    assert "--device cpu: CUDA_VISIBLE_DEVICES=''" in printed and "--verbose: nothing more is printed" in printed
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert list(results["tasks"]) == ["algorithmic/spell_backward"]
    from evaluation.evaluate_model import cli_overrides, parse_args

    assert load_config(str(path), cli_overrides(parse_args([*argv, "--batch-size", "3"]))).model.batch_size == 3

    assert main([*argv, "--category", "games"]) == 2
    assert "--category games: no such category in this suite; its categories: arithmetic, algorithmic" \
        in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--device", "gpu0"])
    assert exit_.value.code == 2 and "--device 'gpu0': give cpu, cuda or cuda:N" in capsys.readouterr().err
