"""Curriculum: levels come from Reasoning Gym's curricula, move with scores, reach the next items, and are saved."""

import pytest

from envs.curriculum import Curriculum, leveled_config, max_level
from envs.mix import load_mix
from envs.stream import TaskStream

MIX = {
    "tasks": {"spell_backward": {"level": 0}, "chain_sum": {"config": {"max_terms": 3}}},
    "curriculum": {"enabled": True, "window": 8, "promote_at": 0.75, "demote_at": 0.25, "min_samples": 4},
}


def test_levels_map_to_reasoning_gym_configs():
    assert max_level("spell_backward") == 4
    assert leveled_config("spell_backward", {}, 0)["max_word_len"] == 3
    assert leveled_config("spell_backward", {}, 2)["max_word_len"] == 7
    assert leveled_config("spell_backward", {}, 2)["min_word_len"] == 3  # RG's inclusive ranges


def test_update_moves_levels_by_thresholds_over_a_window():
    curriculum = Curriculum(load_mix(MIX))
    assert curriculum.update({"spell_backward": [1, 1, 1]}) == {}  # fewer than min_samples
    assert curriculum.update({"spell_backward": [1]}) == {"spell_backward": 1}
    assert curriculum.update({"spell_backward": [0.5] * 8}) == {}  # between the thresholds
    assert curriculum.update({"spell_backward": [0, 0, 0, 0]}) == {"spell_backward": 0}  # window mean 0.25
    assert curriculum.update({"spell_backward": [0] * 8}) == {}  # already at the first level
    curriculum.update({"chain_sum": [1] * 10})  # a task without a level never moves
    assert "chain_sum" not in curriculum.levels()
    for _ in range(20):
        curriculum.update({"spell_backward": [1] * 4})
    assert curriculum.levels() == {"spell_backward": 4}  # capped at the last level


def test_disabled_curriculum_keeps_start_levels():
    curriculum = Curriculum(load_mix({**MIX, "curriculum": {"enabled": False}}))
    assert curriculum.update({"spell_backward": [1] * 100}) == {}
    assert curriculum.levels() == {"spell_backward": 0}


def test_level_change_reaches_the_next_items_and_survives_a_restore():
    stream = TaskStream(MIX, seed=0)
    before = [x for x in stream.take(40) if x["extra_info"]["task"] == "spell_backward"]
    assert before and all(len(x["extra_info"]["entry"]["answer"]) == 3 for x in before)
    for _ in range(3):
        stream.curriculum.update({"spell_backward": [1.0] * 4})
    assert stream.curriculum.levels() == {"spell_backward": 3}
    after = [x for x in stream.take(60) if x["extra_info"]["task"] == "spell_backward"]
    assert all(x["extra_info"]["level"] == 3 and x["extra_info"]["config"]["max_word_len"] == 9 for x in after)
    assert max(len(x["extra_info"]["entry"]["answer"]) for x in after) > 3
    state = stream.state_dict()
    restored = TaskStream(MIX, seed=0)
    restored.load_state_dict(state)
    assert restored.curriculum.levels() == {"spell_backward": 3}
    assert [x["extra_info"]["entry"] for x in restored.take(10)] == [x["extra_info"]["entry"] for x in stream.take(10)]


def test_curriculum_refuses_dataloader_workers():
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(TaskStream(MIX, seed=0), batch_size=2, num_workers=1, collate_fn=lambda b: b)
    with pytest.raises(RuntimeError, match="dataloader_num_workers=0"):
        next(iter(loader))
