"""The held-out suite derived from a training mix (evaluation/mix_suite.py), for runs whose config names none: every
task of the mix with its training config, on the evaluation split, 150 items a task, held-out tasks apart."""

from __future__ import annotations

import yaml

from envs.curriculum import leveled_config
from envs.mix import load_mix
from envs.splits import question_owner
from evaluation.config import config_from_dict
from evaluation.mix_suite import ITEMS_PER_TASK, describe, suite_from_mix
from evaluation.suite import build_suite

MIX = {"tasks": {"chain_sum": {"weight": 1.0, "config": {"min_terms": 2, "max_terms": 2, "max_digits": 1}},
                 "spelled": {"task": "spell_backward", "weight": 2.0, "level": 1}},
       "held_out": ["basic_arithmetic"]}


def test_the_suite_holds_every_task_of_the_mix_as_trained_on_the_evaluation_split():
    mix = load_mix(MIX)
    suite = suite_from_mix(mix, on_cpu=True)
    written = yaml.safe_load(yaml.safe_dump(suite))  # as the pipeline writes it; the evaluator gets --model
    cfg = config_from_dict({**written, "model": {**written["model"], "path": "MODEL"}}, "derived")
    groups = {c.name: {t.key: t for t in c.tasks} for c in cfg.categories}
    assert sorted(groups) == ["held_out", "in_mix"] and sorted(groups["in_mix"]) == ["chain_sum", "spelled"]
    assert list(groups["held_out"]) == ["basic_arithmetic"]
    spelled = groups["in_mix"]["spelled"]
    assert spelled.task == "spell_backward" and spelled.config == leveled_config("spell_backward", {}, 1)
    assert groups["in_mix"]["chain_sum"].config == MIX["tasks"]["chain_sum"]["config"]
    assert all(t.size == ITEMS_PER_TASK == 150 and t.seed == 42 for g in groups.values() for t in g.values())
    assert cfg.modes == ["greedy"] and cfg.model.backend == "hf" and cfg.model.dtype == "float32"
    assert suite_from_mix(mix, on_cpu=False)["model"]["backend"] == "vllm"
    items = build_suite(cfg)
    assert len(items) == 3 * 150 and {i.result_key for i in items} == {
        "in_mix/chain_sum", "in_mix/spelled", "held_out/basic_arithmetic"}
    assert all(question_owner(i.entry["question"]) == "evaluation" for i in items)
    assert describe("mine", suite) == ("450 evaluation-split items of mix mine, 150 per task (2 task(s) of the mix, "
                                       "1 task(s) held out; greedy)")
