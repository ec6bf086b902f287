"""The training run's generation dump (training/trainer/generations.py): its defaults, verl's validation dump it sits
beside, which groups it picks, what a step's file and summary hold, and a failed dump that does not stop training."""

from __future__ import annotations

import json

from tests.utils.generation_dumps import training_records, write_training_dumps
from training.trainer.generations import SUMMARY_FILE, DumpSettings, dump_step, pick_groups, step_summary
from training.trainer.metrics import SampleRecord


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
