"""Suite items: deterministic, rendered like training, and never a training question."""

from pathlib import Path

import pytest

from envs.generation import generate_entry
from envs.prompts import build_messages, resolve_system_prompt
from evaluation.config import config_from_dict, load_config
from evaluation.suite import build_suite, composite_members

SMALL_SPACE = {"chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
               "lcm": {"min_numbers": 2, "max_numbers": 2, "min_value": 1, "max_value": 20},
               "spell_backward": {"min_word_len": 3, "max_word_len": 4}}


def suite_cfg(size=20, seed=42):
    tasks = {name: {"config": cfg} for name, cfg in SMALL_SPACE.items()}
    return config_from_dict({"model": {"path": "m", "backend": "hf"}, "suite": {
        "size": size, "seed": seed, "categories": {"small": {"tasks": tasks}},
        "composites": {"mix": {"size": 12, "tasks": {"chain_sum": {"weight": 3.0, "config": SMALL_SPACE["chain_sum"]},
                                                      "spell_backward": {"weight": 1.0}}}}}})


def test_items_are_deterministic_with_stable_ids_and_training_prompts():
    first, second = build_suite(suite_cfg()), build_suite(suite_cfg())
    assert [i.item_id for i in first] == [i.item_id for i in second]
    assert [i.entry["question"] for i in first] == [i.entry["question"] for i in second]
    assert len({i.item_id for i in first}) == len(first) == 3 * 20 + 12
    item = first[0]
    assert item.item_id == "small/chain_sum/00000" and item.result_key == "small/chain_sum"
    assert item.messages == build_messages(item.entry["question"], resolve_system_prompt("DeepSeekZero"))
    assert item.entry == generate_entry("chain_sum", SMALL_SPACE["chain_sum"], "evaluation", 42, 0)


def test_composite_draws_follow_weights_and_do_not_depend_on_size():
    cfg = suite_cfg()
    comp = cfg.composites[0]
    picks = composite_members(comp)
    comp.size = 400
    more = composite_members(comp)
    assert more[:12] == picks
    assert 0.65 < more.count(0) / 400 < 0.85  # weight 3 : 1


@pytest.mark.parametrize("task", sorted(SMALL_SPACE))
def test_evaluation_questions_never_appear_in_training_samples(task):
    """Even tasks with tiny question spaces: the evaluation split never reuses a train-split question."""
    config = SMALL_SPACE[task]
    evaluation = {i.entry["question"] for i in build_suite(suite_cfg(size=60)) if i.task == task}
    train = {generate_entry(task, config, "train", seed, pos)["question"] for seed in (0, 1, 42) for pos in range(700)}
    assert evaluation and train
    assert not evaluation & train


SUITES = sorted((Path(__file__).resolve().parents[2] / "configs" / "eval").glob("*.yaml"))


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p.stem.startswith("inter_") else [])
                                  for p in SUITES], ids=[p.stem for p in SUITES])
def test_every_shipped_suite_builds_its_first_items(path):
    cfg = load_config(str(path), ["model.path=x", "suite.size=1"])
    for comp in cfg.composites:
        comp.size = 1
    for task in (t for c in cfg.categories for t in c.tasks):  # sizes given per category (quickstart) too
        task.size = 1
    items = build_suite(cfg)
    assert len(items) == sum(len(c.tasks) for c in cfg.categories) + len(cfg.composites)
    assert all(i.entry["question"] and i.messages[-1]["content"] == i.entry["question"] for i in items)
