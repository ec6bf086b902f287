"""One scoring for training and evaluation: the eval suite's `reward:` section, `--from-run` (the training run's
reward options, prompt and sampling), the paired base-vs-trained interval and the refusal of runs scored differently."""

import asyncio
import json
from pathlib import Path

import pytest

from envs.run_scoring import eval_overrides, read_scoring, scoring_settings, write_scoring
from envs.verl_reward import compute_score
from evaluation.backends.base import Completion
from evaluation.compare import NotComparable, compare_results, comparison_markdown, paired_interval, verdict
from evaluation.config import ConfigError, load_config
from evaluation.reward_section import reward_options
from evaluation.evaluate_model import main
from evaluation.runner import score_completions
from evaluation.suite import build_suite
from training.launch.config import compose_config

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "eval" / "quickstart.yaml")
SMOKE = str(REPO / "configs" / "eval" / "smoke.yaml")
SMALL = ["suite.categories.in_mix.size=2", "suite.categories.not_trained.size=2", "suite.categories.probe.size=1"]


@pytest.fixture(scope="module")
def quickstart_run(tmp_path_factory) -> Path:
    """A quickstart training run's folder as training leaves it at launch: scoring.json from the composed config."""
    run = tmp_path_factory.mktemp("run")
    cfg = compose_config("quickstart", [f"trainer.default_local_dir={run}", "data.max_response_length=48"])
    write_scoring(cfg)
    return run


def training_reward(item, response: str) -> dict:
    """The reward verl's workers compute in a quickstart run (env.reward as reward_kwargs)."""
    cfg = compose_config("quickstart", ["data.max_response_length=48"])
    kwargs = {k: v for k, v in scoring_settings(cfg)["reward"].items()}
    extra_info = {"entry": item.entry, "task": item.task_key, "task_name": item.task, "config": item.config}
    return asyncio.run(compute_score(item.task, response, item.entry["answer"], extra_info, **kwargs))


def test_fallback_only_response_scores_the_same_in_training_and_evaluation(quickstart_run):
    cfg = load_config(QUICKSTART, ["model.path=unused", *SMALL, *eval_overrides(read_scoring(quickstart_run))])
    item = next(i for i in build_suite(cfg) if i.task == "chain_sum")
    response = f"Let me add them up. 3 plus a few gives {item.entry['answer']}"  # no <answer> tags
    train = training_reward(item, response)
    evaluated = score_completions(item, [Completion(response, 12, "stop")], reward_options(cfg))[0]
    assert train["answer_found"] == 0.0 and train["score"] == 1.0 and train["acc"] == 1.0
    assert {k: evaluated[k] for k in ("score", "acc", "raw_score", "pred")} == \
        {k: train[k] for k in ("score", "acc", "raw_score", "pred")}
    # the suite without a reward section scores tags only: the same response gets nothing
    tags_only = load_config(SMOKE, ["model.path=unused"])
    assert score_completions(item, [Completion(response, 12, "stop")], reward_options(tags_only))[0]["score"] == 0.0


def test_the_chat_template_options_and_the_think_flag_score_as_training_did(tmp_path):
    """A run with thinking switched by data.apply_chat_template_kwargs: --from-run hands the evaluator the same
    template options, and a response after a prompt that opened the think block scores as in training."""
    cfg = compose_config("quickstart", [f"trainer.default_local_dir={tmp_path}", "data.max_response_length=48",
                                        "+data.apply_chat_template_kwargs.enable_thinking=true",
                                        "env.reward.require_think=true", "env.reward.answer_forms=[answer,boxed]"])
    settings = read_scoring(write_scoring(cfg).parent)
    assert settings["chat_template_kwargs"] == {"enable_thinking": True}
    evaluation = load_config(QUICKSTART, ["model.path=unused", *SMALL, *eval_overrides(settings)])
    assert evaluation.model.chat_template_kwargs == {"enable_thinking": True}
    assert reward_options(evaluation).answer_forms == ("answer", "boxed")
    item = next(i for i in build_suite(evaluation) if i.task == "chain_sum")
    response = f"7 + 5 is 12, so {item.entry['answer']}</think>\nThe sum is \\boxed{{{item.entry['answer']}}}."
    extra_info = {"entry": item.entry, "task": item.task_key, "task_name": item.task, "config": item.config,
                  "prompt_opens_think": True}
    train = asyncio.run(compute_score(item.task, response, item.entry["answer"], extra_info, **settings["reward"]))
    evaluated = score_completions(item, [Completion(response, 12, "stop", prompt_opens_think=True)],
                                  reward_options(evaluation))[0]
    assert train["acc"] == 1.0 and train["format_ok"] == 1.0
    assert {k: evaluated[k] for k in ("score", "acc", "format_ok", "pred")} == \
        {k: train[k] for k in ("score", "acc", "format_ok", "pred")}


def test_reward_section_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"quickstart.yaml: unknown key 'reward.answer_fallbak'; did you mean "
                                          r"answer_fallback"):
        load_config(QUICKSTART, ["model.path=x", "reward.answer_fallbak=last_number"])
    with pytest.raises(ConfigError, match=r"'reward.partial_credit' must be true/false"):
        load_config(QUICKSTART, ["model.path=x", "reward.partial_credit=3"])
    with pytest.raises(ConfigError, match=r"answer_fallback='first'; use one of"):
        load_config(QUICKSTART, ["model.path=x", "reward.answer_fallback=first"])
    with pytest.raises(ConfigError, match=r"'decoding' must list greedy and/or sampled in that order"):
        load_config(QUICKSTART, ["model.path=x", "decoding=[sampled,greedy]"])


def test_from_run_missing_scoring_file_is_a_clear_error(tmp_path, capsys):
    assert main(["--config", QUICKSTART, "--from-run", str(tmp_path), "--model", "x"]) == 2
    assert "no scoring.json there" in capsys.readouterr().err


def test_from_run_cli_records_options_greedy_and_sampled_and_compares(quickstart_run, tiny_model_dir, tmp_path,
                                                                     capsys):
    """The tiny model through the CLI: both modes, the run's options recorded, a paired self-comparison, and a
    comparison with a run scored tags-only refused."""
    common = ["--config", QUICKSTART, "--from-run", str(quickstart_run), "--model", str(tiny_model_dir), *SMALL,
              "sampling.max_tokens=8"]
    assert main([*common, "--output", str(tmp_path / "a")]) == 0
    for mode, n in (("greedy", 1), ("sampled", 4)):
        run = json.loads((tmp_path / "a" / mode / "results.json").read_text())["run"]
        assert run["reward"]["answer_fallback"] == "last_number" and run["reward"]["partial_credit"] is True
        assert run["sampling"]["n"] == n and run["sampling"]["max_tokens"] == 8
        assert run["sampling"]["temperature"] == (0.0 if mode == "greedy" else 1.0)
        assert run["system_prompt"].startswith("Answer with the final result only")
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "a"), "--output", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "greedy (T=0, 1 sample per item): base -> trained" in out and "sampled (T=1.0, 4 samples per item)" in out
    assert "  overall    " in out and "+0.000 [+0.000, +0.000]  not resolved" in out
    cmp = json.loads((tmp_path / "cmp" / "greedy" / "comparison.json").read_text())
    assert cmp["overall"]["ci95"] == [0.0, 0.0] and cmp["overall"]["paired_items"] == 10
    assert main([*common, "reward.answer_fallback=false", "reward.partial_credit=false",
                 "--output", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    assert main(["--compare", str(tmp_path / "a"), str(tmp_path / "b"), "--output", str(tmp_path / "cmp2")]) == 2
    err = capsys.readouterr().err
    assert "refusing to compare" in err and "reward:" in err and "--from-run" in err


def _results(accs: dict[str, float], **run) -> dict:
    overall = sum(accs.values()) / len(accs)
    return {"run": {"model": "m", "reward": {}, "system_prompt": "p",
                    "sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "n": 1}, **run},
            "tasks": {"g/t": {"accuracy": overall}}, "groups": {"g": {"accuracy": overall}},
            "overall": {"accuracy": overall}, "item_accuracy": accs}


def test_paired_interval_resolves_a_real_change_and_not_noise():
    items = [f"g/t/{i:05d}" for i in range(400)]
    base = {i: float(k % 4 == 0) for k, i in enumerate(items)}  # 0.25
    better = dict(base, **{i: 1.0 for i in items[1:160:4]})  # 40 wrong items turn right: +0.10
    cmp = compare_results(_results(base), _results(better))
    assert cmp["overall"]["paired_delta"] == pytest.approx(0.10)
    lo, hi = cmp["overall"]["ci95"]
    assert 0 < lo < 0.10 < hi and cmp["overall"]["verdict"] == "better (resolved)"
    assert cmp["tasks"][0]["verdict"] == "better (resolved)"
    shuffled = dict(base, **{i: 1.0 for i in items[1:40:4]}, **{i: 0.0 for i in items[0:40:4]})  # 10 up, 10 down
    assert verdict(paired_interval(base, shuffled, items)) == "not resolved"
    assert verdict(paired_interval(better, base, items)) == "worse (resolved)"
    assert cmp["overall"]["common_answer"] is None  # results written before the metric existed
    with_share = _results(better)
    with_share["tasks"]["g/t"]["common_answer"] = with_share["overall"]["common_answer"] = 0.827
    with_share["tasks"]["g/t"]["repeated_answer"] = 0.953
    cmp = compare_results(_results(base), with_share)
    assert cmp["tasks"][0]["common_answer"] == cmp["overall"]["common_answer"] == 0.827
    assert cmp["tasks"][0]["repeated_answer"] == 0.953 and cmp["overall"]["repeated_answer"] is None
    assert "| better (resolved) | 0.827 | 0.953 |" in comparison_markdown(cmp)
    with pytest.raises(NotComparable, match="sampling.temperature: base 0.0 vs trained 1.0"):
        compare_results(_results(base), _results(better, sampling={"temperature": 1.0, "top_p": 1.0,
                                                                   "max_tokens": 8, "n": 1}))


def test_items_that_repeat_a_question_count_once_in_the_interval(tmp_path):
    """A suite drawn from a small question space asks a question several times (the quickstart's 150 one-digit sums
    ask 19), and greedy decoding answers each repeat alike: twenty copies of 20 questions carry the evidence of 20
    items, not 400. The interval resamples questions with all their copies; without repeats it is the item one."""
    questions = [f"q{k}" for k in range(20)]
    base_q = {q: float(k % 4 == 0) for k, q in enumerate(questions)}
    better_q = dict(base_q, **{q: 1.0 for q in questions[1:8:4]})  # 2 of 20 questions turn right: +0.10
    items = [f"g/t/{k:05d}" for k in range(400)]
    asked = {item: questions[k % 20] for k, item in enumerate(items)}
    base, better = ({i: accs[asked[i]] for i in items} for accs in (base_q, better_q))
    as_items = paired_interval(base, better, items)
    as_questions = paired_interval(base, better, items, questions=asked)
    assert as_items[0] > 0  # 400 independent items would resolve it ...
    assert as_questions == pytest.approx(paired_interval(base_q, better_q, questions))  # ... 40 questions do not
    assert as_questions[0] <= 0 < as_questions[1]
    assert as_questions[1] - as_questions[0] > 2.5 * (as_items[1] - as_items[0])
    distinct = {i: i for i in items}
    assert paired_interval(base, better, items, questions=distinct) == as_items  # no repeats: the item interval
    cmp = compare_results(dict(_results(base), item_question=asked), dict(_results(better), item_question=asked))
    assert cmp["overall"]["verdict"] == "not resolved" and cmp["overall"]["paired_questions"] == 20
    assert "| 400 (20) | not resolved |" in comparison_markdown(cmp)
    # results written before they kept the questions: read from the generations beside them
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(_results(base)))
    (folder / "generations.jsonl").write_text("".join(json.dumps({"item_id": i, "question": asked[i]}) + "\n"
                                                      for i in items))
    from evaluation.metrics import question_key
    from evaluation.report import load_results

    loaded = load_results(str(folder))["item_question"]
    assert len(set(loaded.values())) == 20 and loaded[items[0]] == loaded[items[20]] == question_key(
        {"item_id": items[0], "question": "q0"})


def test_a_runs_own_interval_resamples_questions_too():
    from evaluation.metrics import summarize

    records = [{"item_id": f"g/t/{k:05d}", "group": "g", "task_key": "t", "question": f"q{k % 10}",
                "answer": str(k % 10), "accuracy": float(k % 10 < 5)} for k in range(100)]
    stats = summarize(records, pass_k=[1])
    assert stats["n_items"] == 100 and stats["n_questions"] == 10
    wide = stats["accuracy_ci95"]
    narrow = summarize([dict(r, question=r["item_id"]) for r in records], pass_k=[1])["accuracy_ci95"]
    assert wide[1] - wide[0] > 2.5 * (narrow[1] - narrow[0])


def _answered(golds: dict[str, list[str]], preds: dict[str, list[str]]) -> dict:
    """results.json as evaluation.runner writes it, from one greedy answer per item (evaluation.metrics.aggregate)."""
    from evaluation.metrics import aggregate, item_accuracy

    records = [{"item_id": f"g/{task}/{k:05d}", "group": "g", "task_key": task, "task": task, "sample": 0,
                "answer": gold, "pred": pred, "accuracy": float(gold == pred), "score": float(gold == pred)}
               for task in golds for k, (gold, pred) in enumerate(zip(golds[task], preds[task]))]
    results = aggregate(records, [1], {}, resamples=10)
    results["item_accuracy"] = item_accuracy(records)
    return {"run": {"model": "m", "reward": {}, "system_prompt": "p",
                    "sampling": {"temperature": 0.0, "top_p": 1.0, "max_tokens": 8, "n": 1}}, **results}


def test_the_beyond_prior_pool_leaves_out_a_task_one_answer_carries():
    """Letter counts, where "1" is right on 83%: a model that learns to answer "1" gains +0.83 there, and the overall
    change is resolved; the pool of the tasks no answer repeated can carry (sums, answers spread) says what changed
    beyond that prior, before and after the sums improve."""
    counts = ["1"] * 249 + ["2"] * 51  # 0.83
    sums = [str(k % 19) for k in range(300)]  # no answer on more than 6% of the items
    base = _answered({"counts": counts, "sums": sums}, {"counts": ["0"] * 300, "sums": sums[:90] + ["x"] * 210})
    prior = _answered({"counts": counts, "sums": sums}, {"counts": ["1"] * 300, "sums": sums[:90] + ["x"] * 210})
    cmp = compare_results(base, prior)
    assert cmp["overall"]["verdict"] == "better (resolved)"
    beyond = cmp["beyond_prior"]
    assert beyond["tasks"] == ["g/sums"] and beyond["set_apart"] == {"g/counts": 0.83}
    assert beyond["paired_items"] == 300 and beyond["base"] == beyond["trained"] == 0.3
    assert beyond["verdict"] == "not resolved"
    markdown = comparison_markdown(cmp)
    assert "### Beyond an answer prior" in markdown and "set apart: g/counts 83%" in markdown
    assert "| beyond prior | 0.300 | 0.300 | +0.000 |" in markdown
    skill = _answered({"counts": counts, "sums": sums}, {"counts": ["1"] * 300, "sums": sums[:150] + ["x"] * 150})
    beyond = compare_results(base, skill)["beyond_prior"]
    assert beyond["paired_delta"] == pytest.approx(0.2) and beyond["verdict"] == "better (resolved)"
