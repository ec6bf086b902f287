"""verl's replay buffers with what our trainer adds (training/trainer/trainer.py swaps them in at init): each sampled
batch is shown to the fault guard before it is trained on and listed in submission order, and under dynamic
sampling the groups verl drops are read before they are cleared."""

from __future__ import annotations

from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from training.trainer.seeding import ordered_keys


class GuardedReplayBuffer(ReplayBuffer):
    """verl's sync replay buffer that shows the trainer each sampled batch before it is trained on (`guard`), so that
    a batch short of failed samples stops the run instead of training (training/trainer/faults.py)."""

    guard = None  # callable(batch, metrics), set by the trainer
    order = None  # {uid: (submission, position)} of OrderedSubmissions, set by the trainer's fit

    def sample(self, *args, **kwargs):
        batch, metrics = super().sample(*args, **kwargs)
        if self.guard is not None:
            self.guard(batch, metrics)
        return batch, metrics

    def _materialize_batch(self, partition_id: str, selected_prompt_uids: list[str], partition_snapshot: dict):
        """verl's batch, its trajectories listed in submission order (seeding.ordered_keys) instead of arrival order."""
        batch = super()._materialize_batch(partition_id, selected_prompt_uids, partition_snapshot)
        if self.order is None:
            return batch
        keys, tags = ordered_keys(batch.keys, batch.tags, self.order)
        for uid in selected_prompt_uids:
            self.order.pop(uid, None)
        return type(batch)(keys=keys, tags=tags, partition_id=batch.partition_id, fields=batch.fields,
                           extra_info=batch.extra_info)


class ObservingReplayBuffer(GuardedReplayBuffer):
    """verl's sync replay buffer that shows the trainer each finished training group before verl clears it.

    Under dynamic sampling (algorithm.filter_groups.enable) verl evicts the groups whose scores are all equal
    (`_evict_terminal_groups`) and, once it has enough groups, discards the surplus (`sample`); both go through
    `_clear_groups(partition_id, uids)`, which deletes them from TransferQueue (`tq.kv_clear`). Those groups never
    reach `step()`'s batch, yet they are exactly what a learnability signal must see (the flat groups) and what the
    curriculum must see (the all-correct groups that tell it to promote). verl has no public hook between the decision
    and the clear, and its public `sample()` returns only counts per reward value, not which task a group belonged
    to; the custom_sampler config hook would replace the whole buffer and drop verl's own filter settings. So this
    class overrides the one private method, reads the groups' responses while they are still stored, and then calls
    verl's. The contract test in tests/training/trainer/test_trainer.py pins the code it relies on (signature, trajectory key format
    `{uid}_{i}`, the two callers). Failed groups (a session errored: partial, possibly unscored) are not observed.
    """

    observer = None  # callable(trajectory keys, partition_id), set by the trainer

    def _clear_groups(self, partition_id: str, uids: set[str]) -> None:
        if self.observer is not None and partition_id == "train" and uids:
            finished = set(uids) & self.finished_keys[partition_id]
            keys = [key for key in self.partitions[partition_id] if key.split("_")[0] in finished]
            keys, _ = ordered_keys(keys, [{}] * len(keys), self.order or {})
            if keys:
                self.observer(keys, partition_id)
        for uid in uids:
            (self.order or {}).pop(uid, None)
        super()._clear_groups(partition_id, uids)


class GuardedReplayBufferAsync(GuardedReplayBuffer, ReplayBufferAsync):
    """GuardedReplayBuffer's guard and order over verl's async buffer (staleness drops, refill of exactly k)."""


class ObservingReplayBufferAsync(ObservingReplayBuffer, ReplayBufferAsync):
    """ObservingReplayBuffer over verl's async buffer: the groups it evicts (flat under dynamic sampling, or past
    the off-policy bound) are read before they are cleared, as observations for the curriculum and the sampler."""


REPLAY_BUFFERS = {ReplayBuffer: (GuardedReplayBuffer, ObservingReplayBuffer),
                  ReplayBufferAsync: (GuardedReplayBufferAsync, ObservingReplayBufferAsync)}
