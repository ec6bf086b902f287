"""Learnability-driven task sampling: validation, the weight rule, when weights take effect, state, splits."""

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.utils.dataset.rl_dataset import collate_fn

from envs.mix import load_mix
from envs.sampler import TaskSampler, floored_shares, group_value
from envs.stream import TaskStream, build_validation_set, mix_fingerprint

REPO = Path(__file__).resolve().parents[2]
EASY = REPO / "configs" / "mix" / "easy.yaml"
TASKS = {"chain_sum": {"weight": 1.0, "config": {"min_terms": 2, "max_terms": 2}},
         "spell_backward": {"weight": 1.0, "config": {"min_word_len": 3, "max_word_len": 4}},
         "letter_counting": {"weight": 2.0, "config": {"min_words": 1, "max_words": 3}}}
LEARN = {"strategy": "learnability", "window": 16, "temperature": 0.1, "exploration": 0.0, "floor": 0.2}
MIX = {"tasks": TASKS, "sampler": LEARN}

FLAT_RIGHT, FLAT_WRONG, MIXED = [1.0] * 8, [0.0] * 8, [1.0] * 4 + [0.0] * 4


def sampler(**overrides) -> TaskSampler:
    return TaskSampler(load_mix({"tasks": TASKS, "sampler": {**LEARN, **overrides}}))


def digest(items) -> str:
    rows = [[x["extra_info"]["task"], x["extra_info"]["position"], x["extra_info"]["entry"]["question"],
             x["extra_info"]["entry"]["answer"]] for x in items]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


# ----- validation
@pytest.mark.parametrize("sampler_value, message", [
    ({"strategy": "ucb"}, r"sampler.strategy must be one of \['uniform', 'learnability'\], got 'ucb'"),
    ({"signal": "entropy"}, r"sampler.signal must be one of \['advantage', 'variance'\]"),
    ({"windw": 3}, r"sampler: unknown key\(s\) \['windw'\]; allowed: \['exploration', 'floor'"),
    ({"window": 0}, r"sampler.window must be an integer in \[1, inf\), got 0 \(default 64\)"),
    ({"window": 2.5}, r"sampler.window must be an integer"),
    ({"temperature": 0}, r"sampler.temperature must be a finite number in \(0.0, inf\), got 0"),
    ({"temperature": math.inf}, r"sampler.temperature must be a finite number"),
    ({"exploration": -1}, r"sampler.exploration must be a finite number in \[0.0, inf\)"),
    ({"floor": 1.5}, r"sampler.floor must be a finite number in \[0.0, 1.0\], got 1.5"),
    ({"floor": True}, r"sampler.floor must be a finite number"),
    ("learnability", r"sampler must be a mapping like \{strategy: learnability"),
])
def test_bad_sampler_settings_name_the_key_and_the_fix(sampler_value, message):
    with pytest.raises(ValueError, match=message):
        load_mix({"tasks": {"chain_sum": {}}, "sampler": sampler_value})


def test_sampler_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("tasks: {chain_sum: {}}\nsampler: {strategy: learnability, floor: -0.1}\n")
    with pytest.raises(ValueError, match=rf"{path}: sampler.floor must be"):
        load_mix(path)


def test_default_is_uniform_and_the_prior_is_the_declared_weights():
    mix = load_mix({"tasks": TASKS})
    assert mix.sampler.strategy == "uniform" and not mix.sampler.reweights
    assert TaskSampler(mix).weights() == {"chain_sum": 0.25, "spell_backward": 0.25, "letter_counting": 0.5}
    assert sampler().weights() == pytest.approx({"chain_sum": 0.25, "spell_backward": 0.25, "letter_counting": 0.5})


# ----- the rule
def test_group_values():
    assert group_value(FLAT_RIGHT, "advantage") == group_value(FLAT_WRONG, "variance") == 0.0
    assert group_value(MIXED, "variance") == 1.0
    # binary scores with p = 1/2: mean |advantage| = 2 sqrt(p (1 - p)) = 1 with the population std
    assert group_value(MIXED, "advantage") == pytest.approx(math.sqrt(7 / 8), rel=1e-5)  # verl's unbiased std
    assert group_value([1.0] + [0.0] * 7, "advantage") < group_value(MIXED, "advantage")
    assert group_value([1.0], "advantage") == 0.0


def test_floored_shares_water_fill():
    assert floored_shares([1.0, 0.0, 0.0], [0.1, 0.1, 0.1]) == pytest.approx([0.8, 0.1, 0.1])
    assert floored_shares([3.0, 1.0], [0.0, 0.0]) == pytest.approx([0.75, 0.25])
    assert floored_shares([1.0, 1.0], [0.5, 0.5]) == pytest.approx([0.5, 0.5])
    shares = floored_shares([100.0, 1.0, 1e-12, 0.0], [0.05, 0.05, 0.2, 0.05])
    assert sum(shares) == pytest.approx(1.0) and all(s >= m - 1e-12 for s, m in zip(shares, [0.05, 0.05, 0.2, 0.05]))


def test_weights_move_toward_tasks_with_variance_and_keep_the_floor():
    s = sampler()
    for _ in range(4):
        s.update({"chain_sum": [FLAT_RIGHT] * 4, "spell_backward": [MIXED] * 4, "letter_counting": [FLAT_WRONG] * 4})
    w = s.weights()
    assert w["spell_backward"] > 0.5 > w["letter_counting"]
    assert w["chain_sum"] == pytest.approx(0.2 * 0.25) and w["letter_counting"] == pytest.approx(0.2 * 0.5)  # floors
    assert sum(w.values()) == pytest.approx(1.0)
    assert s.signals()["chain_sum"] == 0.0 and s.signals()["spell_backward"] > 0.9
    # the window forgets: once the easy task shows variance again, it wins its share back
    for _ in range(4):
        s.update({"chain_sum": [MIXED] * 4, "spell_backward": [FLAT_RIGHT] * 4})
    assert s.weights()["chain_sum"] > 0.5 > s.weights()["spell_backward"]


def test_variance_signal_counts_groups_with_any_spread():
    s = sampler(signal="variance")
    s.update({"chain_sum": [[1.0] * 7 + [0.0]] * 4, "spell_backward": [FLAT_RIGHT] * 4, "letter_counting": []})
    assert s.signals() == {"chain_sum": 1.0, "spell_backward": 0.0, "letter_counting": 1.0}  # unobserved: optimistic


def test_exploration_favours_tasks_seen_less_often():
    quiet = sampler(exploration=0.0)
    curious = sampler(exploration=1.0)
    groups = {"chain_sum": [MIXED] * 16, "spell_backward": [MIXED] * 16, "letter_counting": [MIXED] * 1}
    quiet.update(groups)
    curious.update(groups)
    assert quiet.signals() == curious.signals()  # the bonus is exploration, not signal
    assert curious.weights()["letter_counting"] > quiet.weights()["letter_counting"]
    hot = sampler(temperature=100.0)  # a high temperature stays near the prior
    hot.update({"chain_sum": [FLAT_RIGHT] * 16, "spell_backward": [MIXED] * 16})
    assert hot.weights() == pytest.approx({"chain_sum": 0.25, "spell_backward": 0.25, "letter_counting": 0.5}, abs=0.01)


def test_uniform_keeps_the_prior_but_measures_the_signal():
    s = TaskSampler(load_mix({"tasks": TASKS}))
    s.update({"chain_sum": [FLAT_RIGHT] * 8, "spell_backward": [MIXED] * 8})
    assert s.weights() == {"chain_sum": 0.25, "spell_backward": 0.25, "letter_counting": 0.5}
    m = s.metrics()
    assert m["sampling/chain_sum/signal"] == 0.0 and m["sampling/spell_backward/signal"] > 0.9
    assert m["sampling/letter_counting/weight"] == 0.5 and m["sampling/chain_sum/groups"] == 8.0


def test_update_does_not_depend_on_the_order_of_groups():
    a, b = sampler(window=3), sampler(window=3)
    groups = [MIXED, FLAT_RIGHT, [1.0, 0.0, 0.0, 0.0], FLAT_WRONG, [1.0, 1.0, 1.0, 0.0]]
    a.update({"chain_sum": groups})
    b.update({"chain_sum": list(reversed(groups))})
    assert a.state_dict() == b.state_dict() and a.weights() == b.weights()


def test_forget_empties_a_window():
    s = sampler()
    s.update({"chain_sum": [FLAT_RIGHT] * 8})
    s.forget(["chain_sum", "not_in_mix"])
    assert s.counts()["chain_sum"] == 0 and s.weights() == pytest.approx(sampler().weights())


# ----- the stream: when weights take effect, determinism, state
UPDATES = {10: {"chain_sum": [FLAT_RIGHT] * 8, "spell_backward": [MIXED] * 8, "letter_counting": [FLAT_WRONG] * 8},
           25: {"chain_sum": [MIXED] * 8, "spell_backward": [FLAT_RIGHT] * 8}}


def replay(mix, n, updates=UPDATES, seed=0):
    """Reads n items from a fresh stream, applying `updates` ({consumed position: groups}) when the stream reaches
    them; returns the items and the stream."""
    stream = TaskStream(mix, seed=seed)
    items = []
    while len(items) < n:
        if len(items) in updates:
            stream.sampler.update(updates[len(items)])
        items += stream.take(1)
    return items, stream


def test_new_weights_take_effect_from_the_next_position_read():
    items, stream = replay(MIX, 60)
    untouched = TaskStream(MIX, seed=0).take(60)
    assert digest(items[:10]) == digest(untouched[:10])  # before the first update: the prior's draw
    after = [x["extra_info"]["task"] for x in items[10:25]]
    assert after.count("spell_backward") > 10  # the task with variance takes most of the next positions
    # position -> task is the hash against the weights in effect: recompute with the state after each update
    probe = TaskStream(MIX, seed=0)
    probe.sampler.update(UPDATES[10])
    assert [probe.task_at(p) for p in range(10, 25)] == after
    probe.sampler.update(UPDATES[25])
    assert [probe.task_at(p) for p in range(25, 60)] == [x["extra_info"]["task"] for x in items[25:]]


def test_same_update_history_same_items():
    first, _ = replay(MIX, 60)
    second, _ = replay(MIX, 60)
    assert digest(first) == digest(second)
    shifted, _ = replay(MIX, 60, updates={14: UPDATES[10], 25: UPDATES[25]})  # the same update, later: another stream
    assert digest(shifted[:10]) == digest(first[:10]) and digest(shifted) != digest(first)


def test_uniform_sampler_is_byte_identical_to_the_stream_before_samplers():
    """Digests recorded from the stream as it was before envs.sampler existed (commit 14780df), seed 0."""
    assert digest(TaskStream(EASY, seed=0).take(200)) == \
        "315d400a0d4e9ff04b23b8b4260fd5fc668bfb51227905450fd10f999be84a34"
    assert digest(build_validation_set(EASY, 64, seed=0)) == \
        "ba8ad29f15972b4348570b69a3d4c50217596f89167fad7acc21f1c41aa82c7f"
    assert mix_fingerprint(EASY) == "1c9d24c85630ac282ab79033c97cc7590c40625a0c98994f29842c38e5f3ac2d"
    uniform_items, _ = replay({"tasks": TASKS}, 40)  # updates change nothing under uniform
    assert digest(uniform_items) == digest(TaskStream({"tasks": TASKS}, seed=0).take(40))


def test_validation_and_evaluation_are_never_reweighted():
    for split in ("validation", "evaluation"):
        stream = TaskStream(MIX, split=split, seed=0)
        stream.sampler.update(UPDATES[10])
        assert not stream.sampler.reweights
        assert digest(stream.take(30)) == digest(TaskStream({"tasks": TASKS}, split=split, seed=0).take(30))
    assert digest(build_validation_set(MIX, 16)) == digest(build_validation_set({"tasks": TASKS}, 16))


def test_sampler_settings_are_part_of_the_fingerprint():
    assert mix_fingerprint(MIX) != mix_fingerprint({"tasks": TASKS})
    assert mix_fingerprint(MIX) != mix_fingerprint({**MIX, "sampler": {**LEARN, "floor": 0.3}})
    assert mix_fingerprint({"tasks": TASKS, "sampler": {"strategy": "uniform"}}) == mix_fingerprint({"tasks": TASKS})


def test_a_learnability_sampler_refuses_dataloader_workers():
    loader = StatefulDataLoader(TaskStream(MIX, seed=0), batch_size=2, num_workers=1, collate_fn=lambda b: b)
    with pytest.raises(RuntimeError, match="learnability sampler needs the stream in the trainer process"):
        next(iter(loader))


_RESUME = """
import json, sys, torch
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.utils.dataset.rl_dataset import collate_fn
from envs.stream import TaskStream
mix = json.loads(sys.argv[1])
stream = TaskStream(mix, seed=3)
loader = StatefulDataLoader(stream, batch_size=4, num_workers=0, collate_fn=collate_fn)
loader.load_state_dict(torch.load(sys.argv[2], weights_only=False))
updates = json.loads(sys.argv[3])
out, it = [], iter(loader)
for step in range(12):
    out.append([[e["task"], e["entry"]["question"]] for e in next(it)["extra_info"]])
    stream.sampler.update(updates[step % len(updates)])
print(json.dumps({"items": out, "weights": stream.sampler.weights()}))
"""


def test_state_round_trip_through_the_dataloader_in_a_new_process(tmp_path):
    updates = [UPDATES[10], UPDATES[25], {"letter_counting": [MIXED] * 4, "chain_sum": [FLAT_WRONG] * 2}]
    stream = TaskStream(MIX, seed=3)
    loader = StatefulDataLoader(stream, batch_size=4, num_workers=0, collate_fn=collate_fn)
    it, batches = iter(loader), []
    for step in range(20):
        batches.append([[e["task"], e["entry"]["question"]] for e in next(it)["extra_info"]])
        stream.sampler.update(updates[step % 3])  # as the trainer: feedback after each step, before the checkpoint
        if step == 7:
            torch.save(loader.state_dict(), tmp_path / "data.pt")
            saved_weights = stream.sampler.weights()
    state = torch.load(tmp_path / "data.pt", weights_only=False)
    assert "sampler" in json.dumps(state, default=str) and saved_weights != pytest.approx(sampler().weights())
    rotated = updates[8 % 3:] + updates[:8 % 3]  # the new process continues the update sequence at step 8
    run = subprocess.run([sys.executable, "-c", _RESUME, json.dumps(MIX), str(tmp_path / "data.pt"),
                          json.dumps(rotated)], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert run.returncode == 0, run.stderr[-2000:]
    resumed = json.loads(run.stdout.splitlines()[-1])
    assert resumed["items"] == batches[8:20]
    assert resumed["weights"] == stream.sampler.weights()  # exact floats, not approximately


def test_old_uniform_state_without_a_sampler_entry_still_loads():
    saved = TaskStream(EASY, seed=1)
    saved.take(5)
    state = {k: v for k, v in saved.state_dict().items() if k != "sampler"}  # as saved before envs.sampler
    restored = TaskStream(EASY, seed=1)
    restored.load_state_dict(state)
    assert digest(restored.take(5)) == digest(saved.take(5))
