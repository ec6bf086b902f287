"""Our verl trainer on CPU, through verl's real methods up to the GPU boundary.

Contract tests pin what we rely on in verl's private code (a verl upgrade that changes it fails here, loudly);
the rest builds the real trainer with the tiny model and drives verl's own dataloader methods against our stream.
"""

import ast
import inspect
import textwrap

import pytest
import torch
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from training.launch.config import compose_config, resolve_config
from training.trainer.metrics import SampleRecord
from training.trainer.trainer import (
    ASYNC_TRAINER_NAME,
    TRAINER_NAME,
    VERL_MODES,
    ReasoningGymAdditions,
    ReasoningGymAsyncTrainer,
    ReasoningGymTrainer,
    carried_over_metrics,
)
from training.trainer.replay_buffers import GuardedReplayBuffer, ObservingReplayBuffer, ObservingReplayBufferAsync


def assigned_attributes(function) -> set[str]:
    """Names X of every `self.X = ...` in a function's source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    return {target.attr for node in ast.walk(tree) if isinstance(node, ast.Assign) for target in node.targets
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"}


def source(function) -> str:
    return inspect.getsource(function)


# ----- contract: the verl code we rely on -----
def test_contract_init_dataloader_sets_what_verl_sets():
    assert list(inspect.signature(PPOTrainer._init_dataloader).parameters) == ["self"]
    assert list(inspect.signature(ReasoningGymTrainer._init_dataloader).parameters) == ["self"]
    expected = {"train_dataset", "val_dataset", "train_dataloader", "train_dataloader_it", "val_dataloader",
                "steps_per_epoch", "total_training_steps"}
    assert assigned_attributes(PPOTrainer._init_dataloader) == expected
    assert assigned_attributes(ReasoningGymTrainer._init_dataloader) == expected
    assert "self._init_dataloader()" in source(PPOTrainer._setup)
    # verl fetches one prompt at a time in these cases (training.trainer.trainer.needs_exact_refill mirrors it)
    assert ('requires_exact_refill = self.trainer_mode != "sync" or dapo_enabled or sync_refill_failed_groups'
            in source(PPOTrainer._init_dataloader))
    assert "refill_fn=self._add_prompts_to_generate" in source(PPOTrainer._build_replay_buffer)


def test_contract_dataloader_users_in_verl():
    """verl fetches through train_dataloader(_it), restarts it on StopIteration, and saves/loads it as data.pt."""
    fetch = source(PPOTrainer._fetch_one_gen_batch)
    assert "iter(self.train_dataloader)" in fetch and "self.train_dataloader_it" in fetch
    assert 'torch.save(self.train_dataloader.state_dict(), dataloader_local_path)' in source(PPOTrainer._save_checkpoint)
    assert '"data.pt"' in source(PPOTrainer._save_checkpoint)
    assert "self.train_dataloader.load_state_dict(dataloader_state_dict)" in source(PPOTrainer._load_checkpoint)
    assert "for batch_dict in self.val_dataloader" in source(PPOTrainer._validate)


def test_contract_step_runs_before_checkpoint_and_logging():
    assert list(inspect.signature(PPOTrainer.step).parameters) == ["self", "metrics", "timing_raw"]
    fit = source(PPOTrainer.fit)
    assert fit.index("self.step(metrics, self.timing_raw)") < fit.index("self._save_checkpoint()")
    assert fit.index("self._save_checkpoint()") < fit.index("self.logger.log(data=metrics")
    assert "self.total_training_steps" in fit and "self.steps_per_epoch" in fit


def test_contract_verl_branches_on_the_sync_literal():
    """We register under our own names but run as verl's sync or colocated async trainer: verl compares the mode
    with "sync" (anything else is async: its replay buffer, a gen batch of 1, the in-flight prompts checkpointed in
    TransferQueue and re-issued on resume) and reads the mode's own section (colocate_async.num_warmup_batches)."""
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    assert VERL_MODES == {TRAINER_NAME: "sync", ASYNC_TRAINER_NAME: "colocate_async"}
    assert get_trainer_cls("colocate_async") is PPOTrainerColocateAsync
    assert 'self.trainer_mode == "sync"' in source(PPOTrainer._build_replay_buffer)
    assert 'self.trainer_mode != "sync"' in source(PPOTrainer._save_checkpoint)
    assert 'self.trainer_mode != "sync"' in source(PPOTrainer._load_checkpoint)
    assert 'self.trainer_mode == "sync"' in source(PPOTrainer._reissue_inflight_prompts)
    assert "self.trainer_mode = self.config.trainer.v1.trainer_mode" in source(PPOTrainer.__init__)
    assert "self.config.trainer.v1.get(self.trainer_mode, {})" in source(PPOTrainer.__init__)


def test_contract_colocated_async_pauses_the_rollout_and_resends_what_it_aborted():
    """What the CPU server's pause (training/cpu_backend/rollout.py) and async/carried_over rely on: verl's colocated
    async trainer aborts the replicas after sampling and resumes them after the weight update; its client sends an
    "aborted" answer again with the partial response appended and records the weights' steps it spanned, which the
    agent loop tags each trajectory with."""
    from verl.trainer.ppo.v1 import agent_loop_tq
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient

    assert "self.checkpoint_manager.abort_replicas()" in source(PPOTrainerColocateAsync.on_sample_end)
    assert "self.checkpoint_manager.resume_generation_replicas()" in source(PPOTrainerColocateAsync.on_step_end)
    assert "FullyAsyncLLMServerClient" in source(PPOTrainerColocateAsync.get_llm_client)
    generate = source(FullyAsyncLLMServerClient.generate)
    assert 'output.stop_reason not in ("aborted", "abort")' in generate
    assert "prompt_ids=prompt_ids + final_output.token_ids" in generate
    assert 'final_output.extra_fields["min_global_steps"] = min_global_steps' in generate
    assert '"min_global_steps": field["extra_fields"].get("min_global_steps")' in source(
        agent_loop_tq.AgentLoopWorkerTQ._agent_loop_postprocess)


def test_contract_replay_buffer_polls_its_public_interval():
    """A step's rollout wait rounds up to ReplayBuffer.poll_interval (2 s by default); our trainer shortens it."""
    assert "time.sleep(self.poll_interval)" in source(ReplayBuffer._wait_for_next_poll)
    assert "self._wait_for_next_poll(" in source(ReplayBuffer.sample)
    assert "self.replay_buffer = self._build_replay_buffer()" in source(PPOTrainer.__init__)


def test_registered_in_verls_registry():
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync

    assert get_trainer_cls(TRAINER_NAME) is ReasoningGymTrainer
    assert get_trainer_cls(ASYNC_TRAINER_NAME) is ReasoningGymAsyncTrainer
    assert issubclass(ReasoningGymTrainer, PPOTrainerSync)
    assert issubclass(ReasoningGymAsyncTrainer, PPOTrainerColocateAsync)
    for trainer_cls in (ReasoningGymTrainer, ReasoningGymAsyncTrainer):  # nothing of ours beside the additions
        assert {name for name in vars(trainer_cls) if not name.startswith("_")} <= {"name"}
    own = {name for name in vars(ReasoningGymAdditions) if not name.startswith("__")}
    private_overrides = {n for n in own if n.startswith("_") and callable(getattr(PPOTrainer, n, None))}
    assert private_overrides == {"_init_dataloader", "_update_actor"}


def test_contract_update_actor_hands_the_batch_extra_info_to_the_actor():
    """Our `_update_actor` adds the skip's decision to `batch.extra_info` and calls verl's (training/zero_advantage/rules.py):
    verl's v1 trainer updates that dict with its own keys and hands the batch to the actor's workers, where
    TransferQueue turns extra_info into the update batch's non-tensor keys."""
    from verl.utils import transferqueue_utils

    source = inspect.getsource(PPOTrainer._update_actor)
    assert list(inspect.signature(PPOTrainer._update_actor).parameters) == ["self", "batch", "metrics"]
    assert "batch.extra_info.update(extra_info)" in source
    assert source.index("batch.extra_info.update") < source.index("self.actor_rollout_wg.update_actor(batch)")
    assert "meta_info = copy.deepcopy(meta.extra_info)" in inspect.getsource(transferqueue_utils._async_meta_to_realdata)


# ----- the real trainer on CPU -----
def build_trainer(*overrides, trainer_cls=ReasoningGymTrainer):
    cfg = compose_config("quickstart", ["model=tiny", "data.max_prompt_length=512", "env.validation_size=4",
                                        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                                        *overrides])
    trainer = trainer_cls(resolve_config(cfg, gpu_count=1))
    trainer._init_tokenizer()
    trainer._init_dataloader()
    trainer.global_steps = 0
    return trainer


def positions(batch) -> list[int]:
    return [info["position"] for info in batch["extra_info"]]


@pytest.fixture(scope="module")
def trainer(tiny_model_dir):
    return build_trainer()


def test_runs_as_verls_sync_trainer(trainer):
    assert trainer.config.trainer.v1.trainer_mode == "sync" and trainer.trainer_mode == "sync"
    assert type(trainer.replay_buffer) is GuardedReplayBuffer and isinstance(trainer.replay_buffer, ReplayBuffer)
    assert trainer.replay_buffer.poll_interval == trainer.config.env.poll_seconds == 0.05
    assert trainer.total_training_steps == trainer.steps_per_epoch == 20
    assert trainer.config.actor_rollout_ref.actor.optim.total_training_steps == 20
    assert len(trainer.val_dataset) == 4 and trainer.val_dataloader.batch_size == 4


def test_the_async_trainer_runs_as_verls_colocated_async_trainer(tiny_model_dir):
    """trainer.v1.trainer_mode=reasoning_gym_async: verl's async replay buffer with our guard and observer (its
    evictions are observations), prompts fetched one at a time (verl refills exactly the groups it evicts), the same
    stream and validation list."""
    from verl.trainer.ppo.v1.replay_buffer import ReplayBufferAsync

    trainer = build_trainer(f"trainer.v1.trainer_mode={ASYNC_TRAINER_NAME}", trainer_cls=ReasoningGymAsyncTrainer)
    assert trainer.trainer_mode == "colocate_async" and trainer.config.data.gen_batch_size == 1
    assert type(trainer.replay_buffer) is ObservingReplayBufferAsync
    assert isinstance(trainer.replay_buffer, ReplayBufferAsync) and trainer.replay_buffer.observer is not None
    assert trainer.replay_buffer.max_off_policy_threshold == 8 and trainer.parameter_sync_step == 1
    batch = trainer._next_train_batch()
    assert len(batch) == 4 and positions(batch) == [0, 1, 2, 3] and len(trainer.val_dataset) == 4


def test_carried_over_counts_the_responses_begun_under_older_weights():
    """Step 5 trains weights 4: a response sampled wholly under 4 is fresh; one begun under 3 is carried over,
    resumed too if it finished under 4; padding and tags without versions (sync) are not counted."""
    tags = [{"min_global_steps": 4, "max_global_steps": 4}, {"min_global_steps": 3, "max_global_steps": 4},
            {"min_global_steps": 3, "max_global_steps": 3}, {"min_global_steps": 4, "max_global_steps": 4},
            {"is_padding": True, "min_global_steps": 1, "max_global_steps": 1}]
    assert carried_over_metrics(tags, 5) == {"async/carried_over": 0.5, "async/resumed": 0.25}
    assert carried_over_metrics([{"min_global_steps": None}], 5) == {}


def test_verl_fetches_batches_from_the_stream(trainer):
    batch = trainer._next_train_batch()
    assert len(batch) == 4 and len(set(batch["uid"])) == 4
    assert {"raw_prompt", "data_source", "reward_model", "extra_info", "uid"} <= set(batch.keys())
    assert all(source.startswith("reasoning_gym/") for source in batch["data_source"])
    assert all("entry" in info for info in batch["extra_info"])
    validation = next(iter(trainer.val_dataloader))
    assert {info["split"] for info in validation["extra_info"]} == {"validation"}


def test_data_pt_resume_continues_with_the_next_items(trainer, tmp_path):
    trainer._next_train_batch()
    torch.save(trainer.train_dataloader.state_dict(), tmp_path / "data.pt")  # what verl's _save_checkpoint does
    expected = positions(trainer._next_train_batch())
    resumed = build_trainer()
    resumed.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))  # _load_checkpoint
    assert positions(resumed._next_train_batch()) == expected


def test_dynamic_sampling_refills_one_prompt_at_a_time(tiny_model_dir):
    refill = build_trainer("algorithm.filter_groups.enable=true")
    assert refill.config.data.gen_batch_size == 1 and refill.train_dataloader.batch_size == 1
    first = positions(refill._next_train_batch())  # a full batch: train_batch_size single fetches
    refills = [positions(refill._next_train_batch(1)) for _ in range(50)]  # the replay buffer's refill_fn path
    flat = first + [p for r in refills for p in r]
    assert len(first) == 4 and all(len(r) == 1 for r in refills)
    assert flat == sorted(set(flat))  # never repeats, never stops: a stream has no epoch end


def test_curriculum_feedback_moves_levels_and_is_saved_in_data_pt(tmp_path, tiny_model_dir):
    mix = tmp_path / "curriculum.yaml"
    mix.write_text("tasks:\n  spell_backward: {weight: 1.0, level: 0}\n"
                   "curriculum: {enabled: true, window: 8, promote_at: 0.7, demote_at: 0.1, min_samples: 8}\n")
    trainer = build_trainer(f"env.mix={mix}")
    trainer._next_train_batch()
    records = [SampleRecord("spell_backward", str(i // 4), 1.0, 1.0, 1.0, 10.0) for i in range(8)]
    metrics = trainer.apply_feedback(records)
    assert metrics["curriculum/spell_backward/level"] == 1.0
    assert metrics["env/spell_backward/accuracy"] == 1.0 and metrics["env/zero_variance_groups"] == 1.0
    assert metrics["timing/data"] > 0
    torch.save(trainer.train_dataloader.state_dict(), tmp_path / "data.pt")
    resumed = build_trainer(f"env.mix={mix}")
    resumed.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    batch = resumed._next_train_batch()  # the loader restores the stream state when verl first iterates it
    assert resumed.train_dataset.curriculum.levels() == {"spell_backward": 1}
    assert {info["level"] for info in batch["extra_info"]} == {1}


def test_total_training_steps_is_required(tiny_model_dir):
    with pytest.raises(ValueError, match="total_training_steps must be set"):
        build_trainer("trainer.total_training_steps=null")


# ----- the task sampler and the groups verl drops under dynamic sampling
def test_contract_verl_clears_dropped_groups_through_one_method():
    """training.trainer.replay_buffers.ObservingReplayBuffer reads groups in `_clear_groups` before verl deletes them."""
    assert list(inspect.signature(ReplayBuffer._clear_groups).parameters) == ["self", "partition_id", "uids"]
    clear = source(ReplayBuffer._clear_groups)
    assert 'key.split("_")[0] in uids' in clear and "self.partitions[partition_id]" in clear
    assert clear.index("tq.kv_clear(") < clear.index("del self.partitions[partition_id][key]")
    assert "self._clear_groups(partition_id, evicted_uids)" in source(ReplayBuffer._evict_terminal_groups)
    assert "self._clear_groups(partition_id, surplus_uids)" in source(ReplayBuffer.sample)
    assert "self.finished_keys: dict[str, set] = defaultdict(set)" in source(ReplayBuffer.__init__)
    # the evicted uids come from finished groups only (failed ones are partial)
    assert "finished_uids = self.finished_keys[partition_id]" in source(ReplayBuffer._dapo_filtered_keys)


def test_contract_a_sampled_batch_is_listed_by_one_method():
    """GuardedReplayBuffer reorders `_materialize_batch`'s batch (training/trainer/seeding.py): verl builds it there,
    from the snapshot of the partition (arrival order), and `sample` returns it as built."""
    assert list(inspect.signature(ReplayBuffer._materialize_batch).parameters) == [
        "self", "partition_id", "selected_prompt_uids", "partition_snapshot"]
    materialize = source(ReplayBuffer._materialize_batch)
    assert "for key, tag in partition_snapshot.items():" in materialize and "KVBatchMeta(" in materialize
    assert "return self._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)," in source(
        ReplayBuffer.sample)


LEARN_MIX = ("tasks:\n  chain_sum: {weight: 1.0, config: {min_terms: 2, max_terms: 2}}\n"
             "  spell_backward: {weight: 1.0, config: {min_word_len: 3, max_word_len: 4}}\n"
             "sampler: {strategy: learnability, window: 8, temperature: 0.1, exploration: 0.0, floor: 0.2}\n")


def group(task, uid, scores):
    return [SampleRecord(task, uid, float(s), float(s), 1.0, 10.0) for s in scores]


def test_dropped_groups_are_read_before_verl_clears_them(tiny_model_dir, monkeypatch, tmp_path):
    from verl.trainer.ppo.v1 import replay_buffer as replay_module

    from training.trainer import trainer as trainer_module

    mix = tmp_path / "learn.yaml"
    mix.write_text(LEARN_MIX)
    dapo = build_trainer("algorithm.filter_groups.enable=true", f"env.mix={mix}")
    buffer = dapo.replay_buffer
    assert type(buffer) is ObservingReplayBuffer and isinstance(buffer, ReplayBuffer)
    assert buffer.filter_groups_metric is not None  # verl's own settings kept: same object, one method added
    buffer.partitions["train"] = {"a_0": {}, "a_1": {}, "b_0": {}, "b_1": {}, "c_0": {}}
    buffer.finished_keys["train"] = {"a", "b"}
    buffer.failure_keys["train"] = {"c"}
    cleared, read = [], []
    monkeypatch.setattr(replay_module.tq, "kv_clear", lambda partition_id, keys: cleared.append(sorted(keys)))

    def fake_read(keys, partition_id):
        read.append(list(keys))
        return [r for key in keys for r in group("chain_sum", key.split("_")[0], [1.0])], {}

    monkeypatch.setattr(trainer_module, "read_records", fake_read)
    buffer._clear_groups("train", {"a", "c"})
    assert read == [["a_0", "a_1"]]  # the finished group, before verl's clear; the failed group is not read
    assert cleared == [["a", "a_0", "a_1", "c", "c_0"]] and "a_0" not in buffer.partitions["train"]
    buffer._clear_groups("val", {"b"})  # validation groups are never observed
    assert read == [["a_0", "a_1"]]
    kept = group("spell_backward", "s", [1.0, 0.0])
    metrics = dapo.apply_feedback(kept, dapo._dropped_records)
    assert metrics["sampling/dropped_groups"] == 1.0 and metrics["env/zero_variance_groups"] == 0.0
    assert metrics["sampling/observed_zero_variance_groups"] == 0.5
    assert metrics["sampling/chain_sum/groups"] == 1.0 and metrics["sampling/chain_sum/signal"] == 0.0
    assert metrics["sampling/spell_backward/weight"] > metrics["sampling/chain_sum/weight"] == pytest.approx(0.1)


def test_without_dynamic_sampling_the_buffer_is_verls(trainer):
    """verl's buffer with only the failed-sample guard added (training/trainer/faults.py): no observer, verl's sample()."""
    buffer = trainer.replay_buffer
    assert type(buffer) is GuardedReplayBuffer and buffer.observer is None and trainer._dropped_records == []
    assert buffer.guard == trainer._guard_batch and GuardedReplayBuffer.__mro__[1] is ReplayBuffer


def test_sampler_weights_are_logged_and_saved_in_data_pt(tmp_path, tiny_model_dir):
    mix = tmp_path / "learn.yaml"
    mix.write_text(LEARN_MIX)
    trainer = build_trainer(f"env.mix={mix}")
    trainer._next_train_batch()
    records = [r for i in range(4) for r in group("chain_sum", f"c{i}", [1.0] * 4)]
    records += [r for i in range(4) for r in group("spell_backward", f"s{i}", [1.0, 0.0, 1.0, 0.0])]
    metrics = trainer.apply_feedback(records)
    assert metrics["sampling/chain_sum/weight"] == pytest.approx(0.1)  # the floor: 0.2 x its prior 0.5
    assert metrics["sampling/spell_backward/weight"] == pytest.approx(0.9)
    assert metrics["sampling/chain_sum/signal"] == 0.0 and metrics["sampling/spell_backward/signal"] > 0.8
    assert metrics["env/zero_variance_groups"] == 0.5 == metrics["sampling/observed_zero_variance_groups"]
    weights = trainer.train_dataset.sampler.weights()
    torch.save(trainer.train_dataloader.state_dict(), tmp_path / "data.pt")
    expected = positions(trainer._next_train_batch())
    resumed = build_trainer(f"env.mix={mix}")
    resumed.train_dataloader.load_state_dict(torch.load(tmp_path / "data.pt", weights_only=False))
    assert positions(resumed._next_train_batch()) == expected
    assert resumed.train_dataset.sampler.weights() == weights


def test_reward_holes_count_dropped_groups_and_ride_on_the_step_event(tiny_model_dir, tmp_path):
    """env/<task>/{full_marks_not_gold,answer_collapse} read every group scored in the step, those dynamic sampling
    dropped too (a hole's groups are all full marks: flat, dropped), and the warnings reach the next step event."""
    import json

    class Tracking:  # verl's Tracking's interface
        def log(self, data, step, backend=None):
            pass

    dapo = build_trainer("algorithm.filter_groups.enable=true", f"env.logs_dir={tmp_path}")
    dapo.logger = Tracking()  # verl assigns its Tracking in fit(); ours wraps it (training/trainer/progress.py)
    holed = [SampleRecord("chain_sum", f"g{i}", 1.0, 1.0, 1.0, 10.0, pred="7", pred_is_gold=0.0) for i in range(4)]
    metrics = dapo.apply_feedback(group("basic_arithmetic", "k", [1.0, 0.0]), holed)
    assert metrics["env/chain_sum/full_marks_not_gold"] == 1.0 == metrics["env/chain_sum/answer_collapse"]
    assert "env/chain_sum/accuracy" not in metrics  # the other env/* keys are the trained batch's
    dapo.logger.log(data={"timing_s/step": 1.0, **metrics}, step=1)
    event = json.loads((tmp_path / "progress.jsonl").read_text().splitlines()[-1])
    assert event["reward_holes"] == [
        'reward hole? chain_sum: 4 of 4 full marks are not the gold (most often "7", 4x)',
        'reward hole? chain_sum: one answer, "7", has full marks on 4 of 4 items whose golds differ']
