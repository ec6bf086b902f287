"""Our verl trainers: verl's v1 trainers, fed by the envs task stream, with per-task metrics and curriculum.

Registered in verl's trainer registry under two names, one key apart (`trainer.v1.trainer_mode`):
- `reasoning_gym`: verl's synchronous trainer (PPOTrainerSync): a step trains on the responses sampled for it;
- `reasoning_gym_async`: verl's colocated async trainer (PPOTrainerColocateAsync): trainer and rollout share the
  devices, a step takes the first groups that finish and the rest continue under the new weights (partial rollout,
  verl's off-policy bound `trainer.v1.sampler.max_off_policy_threshold`); docs/training.md says when to use it.
Both are `ReasoningGymAdditions` over verl's class; what the additions change:
- `_init_dataloader` (the one private method replaced; verl's needs a dataset with len()): the stream and the fixed
  validation list become StatefulDataLoaders, so verl's checkpoint saves the stream state (with the curriculum) in
  `global_step_N/data.pt` and `trainer.resume_mode=auto` continues the stream where it stopped;
- `step` (public) calls verl's step, then reads the step's scored responses from TransferQueue to log env/* metrics,
  feed the curriculum and the task sampler (envs.sampler) and dump a few groups with their reward fields
  (training/trainer/generations.py, `env.dump`), before verl saves the checkpoint of that step;
- under dynamic sampling (or failed-group refill) verl's replay buffer becomes `ObservingReplayBuffer`
  (training/trainer/replay_buffers.py), which reads the groups verl drops before it clears them, so they count for
  the curriculum and the sampler too (see there);
- `_update_actor` tells the actor's engine whether to leave out the zero-advantage sequences (training/zero_advantage/rules.py);
- `fit` hands verl the agent-loop manager wrapped in `OrderedSubmissions` and the replay buffer lists each sampled
  batch in submission order, not arrival order (training/trainer/seeding.py): a run of one seed repeats exactly
  (sync only: the CPU server is told each submission's size; async batches depend on timing);
- in async mode, `env_feedback` adds async/carried_over: the share of the step's responses begun under older weights.
Everything else, hooks included, is verl's trainer's.
"""

from __future__ import annotations

import logging
import time

import ray
import transfer_queue as tq
from omegaconf import DictConfig, OmegaConf, open_dict
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from training.trainer.data import (
    build_train_dataloader,
    build_train_stream,
    build_val_dataloader,
    build_validation_items,
)
from training.trainer.fault_hooks import FaultHooks
from training.trainer.faults import install_restartable_reward_workers
from training.trainer.generations import DumpSettings, dump_step
from training.trainer.metrics import (
    curriculum_metrics,
    env_metrics,
    groups_by_task,
    record_from_reward,
    reward_extra_info,
    reward_holes,
    scores_by_task,
    zero_variance_fraction,
)
from training.trainer.progress import PROGRESS_FILE, ProgressTracking, append_event, hold_for_step
from training.trainer.rendezvous import choose_port_range, rendezvous_ports
from training.trainer.replay_buffers import REPLAY_BUFFERS
from training.trainer.seeding import CPU_ROLLOUT_NAME, OrderedSubmissions
from training.zero_advantage.rules import DATA_KEY, METRIC_PREFIX, skip_refusal

TRAINER_NAME = "reasoning_gym"
ASYNC_TRAINER_NAME = "reasoning_gym_async"
TRAINER_NAMES = (TRAINER_NAME, ASYNC_TRAINER_NAME)
# verl branches on these literals (replay buffer, gen batch, checkpointing the in-flight prompts): ours run as verl's
VERL_MODES = {TRAINER_NAME: "sync", ASYNC_TRAINER_NAME: "colocate_async"}
logger = logging.getLogger(__name__)
install_restartable_reward_workers()  # this module is imported in the TaskRunner actor, before verl's trainer inits


def is_async(config: DictConfig) -> bool:
    """True for the colocated async trainer (our name, or verl's literal once the trainer has set it)."""
    return str(config.trainer.v1.trainer_mode) in (ASYNC_TRAINER_NAME, VERL_MODES[ASYNC_TRAINER_NAME])


def needs_exact_refill(config: DictConfig) -> bool:
    """True when verl refills prompts one at a time (async, dynamic sampling or failed-group refill): gen batch 1."""
    filter_groups = config.algorithm.get("filter_groups") or {}
    sampler = config.trainer.v1.get("sampler") or {}
    return bool(is_async(config) or filter_groups.get("enable", False)
                or sampler.get("sync_refill_failed_groups", False))


class ReasoningGymAdditions:
    """What we add to a verl v1 trainer (a mixin before FaultHooks and verl's class): the Reasoning Gym task stream
    (reads env.*, data.*, trainer.total_training_steps), its metrics, curriculum and sampler feedback, dumps and
    ordered submissions; its fault handling (watchdog, naming dead processes, the failed-sample guard) is
    FaultHooks'."""

    name = TRAINER_NAME

    def __init__(self, config: DictConfig):
        with open_dict(config):
            config.trainer.v1.trainer_mode = VERL_MODES[self.name]
        super().__init__(config)
        # verl's replay buffer checks for a finished rollout batch every `poll_interval` (2 s by default), so a
        # step's generation time rounds up to it; a short poll costs one small TransferQueue query per period.
        self.replay_buffer.poll_interval = float(config.env.get("poll_seconds", 0.05))
        self.dump_settings = DumpSettings.from_config(config)
        self._dropped_records: list = []  # responses of groups verl dropped during this step (ObservingReplayBuffer)
        self._rollout_server = None  # the CPU backend's one rollout server, found in fit()
        self._rollout_stats: dict = {}  # its counters when last read (rollout_server_metrics)
        self.dropped_read_failures = 0
        self.failed_samples_total = 0
        self.skips_zero_advantage = skip_refusal(config) is None
        reliability = config.env.get("reliability") or {}
        self.max_failed_fraction = float(reliability.get("max_failed_fraction", 0.0))
        if type(self.replay_buffer) in REPLAY_BUFFERS:  # same object and state, methods added
            guarded, observing = REPLAY_BUFFERS[type(self.replay_buffer)]
            self.replay_buffer.__class__ = observing if needs_exact_refill(config) else guarded
            self.replay_buffer.observer = self._observe_dropped if needs_exact_refill(config) else None
            self.replay_buffer.guard = self._guard_batch

    def init(self):
        """verl's init, with the training ranks' rendezvous port taken from a safe range (training/trainer/rendezvous.py)."""
        port_range = choose_port_range(self.config.env.get("rendezvous_ports"))
        logger.info("rendezvous ports %s", port_range)
        with rendezvous_ports(port_range):
            super().init()

    def fit(self, agent_loop_manager):
        """verl's fit, on the manager wrapped to number and announce each submission (training/trainer/seeding.py)."""
        self._rollout_server = self._single_cpu_rollout_server()
        server = self._rollout_server
        announce = None  # async: aborted requests come back unannounced, and a batch depends on timing anyway
        if server is not None and not is_async(self.config):
            announce = lambda count: ray.get(server.expect.remote(count))  # noqa: E731
        submissions = OrderedSubmissions(agent_loop_manager, announce, self._samples_per_prompt)
        self.replay_buffer.order = submissions.order
        return super().fit(submissions)

    def _samples_per_prompt(self, validate: bool) -> int:
        rollout = self.config.actor_rollout_ref.rollout
        return int(rollout.val_kwargs.n if validate else rollout.n)

    def _single_cpu_rollout_server(self):
        """The CPU backend's one transformers server, which the trainer tells each submission's size (it then samples
        the whole submission as one batch) and reads seconds from; None for other rollouts and for several replicas
        (verl routes by load)."""
        if str(self.config.actor_rollout_ref.rollout.name) != CPU_ROLLOUT_NAME:
            return None  # checked before the import below, which registers the CPU backend
        from training.cpu_backend.rollout_adapter import server_actor_name

        servers = []
        for rank in range(2):
            try:
                servers.append(ray.get_actor(server_actor_name(rank)))
            except ValueError:
                break
        if len(servers) != 1:
            logger.info("%d rollout replicas: batches are gathered as requests arrive (not reproducible)", len(servers))
            return None
        return servers[0]

    def rollout_server_metrics(self) -> dict[str, float]:
        """The CPU rollout server's seconds this step: sampling (`rollout/sampler_seconds`) and a batch's wait for
        its requests (`rollout/gather_seconds`); what `timing_s/gen` holds beyond them is the agent loop around it."""
        if self._rollout_server is None:
            return {}
        stats = ray.get(self._rollout_server.get_stats.remote())
        before, self._rollout_stats = self._rollout_stats, stats
        return {f"rollout/{name}": float(stats[key]) - float(before.get(key, 0.0))
                for name, key in (("sampler_seconds", "seconds"), ("gather_seconds", "gather_seconds"))}

    # The console (training/launch/console.py) follows the run through <env.logs_dir>/progress.jsonl: verl's Tracking,
    # assigned to self.logger in fit(), is wrapped to append each step's numbers (and all of them to metrics.jsonl);
    # the hooks add the phases.
    @property
    def logger(self):
        return self.__dict__.get("_tracking")

    @logger.setter
    def logger(self, tracking):
        self.__dict__["_tracking"] = ProgressTracking(tracking, self._logs_dir(), self.total_training_steps)

    def _logs_dir(self):
        from pathlib import Path

        return Path(str(self.config.env.get("logs_dir") or "logs"))

    def _progress(self, kind: str, **fields) -> None:
        try:
            append_event(self._logs_dir() / PROGRESS_FILE, {"kind": kind, "step": int(getattr(self, "global_steps", 0)),
                                                 "total": int(self.total_training_steps), "time": time.time(),
                                                 **fields})
        except OSError:
            logger.warning("could not write the console's progress file", exc_info=True)

    def on_init_end(self):
        super().on_init_end()
        self._progress("ready", validate_first=bool(self.config.trainer.get("val_before_train", True)))

    def on_validate_begin(self):
        super().on_validate_begin()
        self._progress("validating", items=len(self.val_dataset))

    def on_validate_end(self):
        super().on_validate_end()
        self.rollout_server_metrics()  # validation's sampling is not the next step's

    def on_train_begin(self):
        super().on_train_begin()
        self.rollout_server_metrics()  # counting starts here
        self._progress("train_begin")

    def _observe_dropped(self, keys: list[str], partition_id: str) -> None:
        """Reads the responses of groups verl is about to clear; they count at this step's feedback."""
        try:
            records, _ = read_records(keys, partition_id)
        except Exception:  # a lost observation must not stop training; it is counted and logged
            self.dropped_read_failures += 1
            logger.warning("could not read %d dropped responses before verl cleared them", len(keys), exc_info=True)
            return
        self._dropped_records.extend(records)

    def _init_dataloader(self):
        """Builds the stream and validation loaders; sets what verl's version sets (pinned by a contract test)."""
        config = self.config
        steps = config.trainer.get("total_training_steps")
        if not steps or int(steps) < 1:
            raise ValueError("trainer.total_training_steps must be set (>= 1): a task stream has no epochs")
        if needs_exact_refill(config):
            with open_dict(config):
                config.data.gen_batch_size = 1
        gen_batch_size = config.data.get("gen_batch_size") or config.data.train_batch_size
        self.train_dataset = build_train_stream(config, self.tokenizer)
        self.val_dataset = build_validation_items(config, self.tokenizer)
        self.train_dataloader = build_train_dataloader(self.train_dataset, int(gen_batch_size))
        self.train_dataloader_it = None
        self.val_dataloader = build_val_dataloader(self.val_dataset)
        self.total_training_steps = int(steps)
        self.steps_per_epoch = self.total_training_steps  # one pass of the loop; the stream never ends
        with open_dict(config):
            config.trainer.total_epochs = 1
            optim_steps = self.total_training_steps * self.parameter_sync_step
            if OmegaConf.select(config, "actor_rollout_ref.actor.optim"):
                config.actor_rollout_ref.actor.optim.total_training_steps = optim_steps
            if OmegaConf.select(config, "critic.optim"):
                config.critic.optim.total_training_steps = optim_steps
        logger.info("task stream ready: %d steps, gen batch %s, %d validation items",
                    self.total_training_steps, gen_batch_size, len(self.val_dataset))

    def step(self, metrics: dict, timing_raw: dict):
        """verl's step (a failure names the dead processes: FaultHooks), then env metrics and curriculum feedback
        from the step's scored responses."""
        batch = super().step(metrics, timing_raw)
        with marked_timer("env_feedback", timing_raw, color="cyan"):
            metrics.update(self.env_feedback(batch))
            metrics.update(self.rollout_server_metrics())
        self.step_trained()
        return batch

    def _update_actor(self, batch, metrics: dict):
        """verl's actor update, told whether to leave out the zero-advantage sequences. verl's MFU counts every
        token of the batch; it is scaled to the tokens the update ran (the flops of a token roughly do not depend
        on which sequences are left out)."""
        batch.extra_info[DATA_KEY] = self.skips_zero_advantage
        batch = super()._update_actor(batch, metrics)
        skipped = metrics.get(f"actor/{METRIC_PREFIX}tokens")
        if skipped is not None and "perf/mfu/actor" in metrics:
            metrics["perf/mfu/actor"] *= 1 - float(skipped)
        return batch

    def env_feedback(self, batch) -> dict[str, float]:
        """Reads the scores of the step's non-padding responses from TransferQueue, applies them, dumps a few."""
        keys = [key for key, tag in zip(batch.keys, batch.tags) if not tag.get("is_padding", False)]
        limit = int(self.config.data.max_response_length)
        records, reward_timing = read_records(keys, batch.partition_id, limit) if keys else ([], {})
        dropped, self._dropped_records = self._dropped_records, []
        metrics = self.apply_feedback(records, dropped)
        metrics.update(reward_timing)
        if is_async(self.config):
            metrics.update(carried_over_metrics(batch.tags, int(getattr(self, "global_steps", 0))))
        if keys:
            start = time.perf_counter()
            dump_step(self.dump_settings, getattr(self, "global_steps", 0), keys, records, batch.partition_id,
                      self.tokenizer)
            metrics["timing/generation_dump"] = time.perf_counter() - start
        return metrics

    def apply_feedback(self, records, dropped=()) -> dict[str, float]:
        """Feeds the step's groups to the curriculum (accuracies) and the task sampler (group scores); returns env/*
        (of the trained batch; the reward-hole keys of all), curriculum/*, sampling/* and timing/data metrics.

        `dropped`: responses of groups verl generated and scored this step but dropped (dynamic sampling). They are
        observations like the others: the curriculum and the sampler see every scored group, and
        sampling/observed_zero_variance_groups is the flat share over all of them (env/zero_variance_groups is the
        trained batch's, about 0 under dynamic sampling). New sampler weights apply from the next prompt drawn.
        """
        observed = [*records, *dropped]
        curriculum, sampler = self.train_dataset.curriculum, self.train_dataset.sampler
        moved = curriculum.update(scores_by_task(observed))
        if moved:
            logger.info("curriculum moved at step %s: %s", getattr(self, "global_steps", "?"), moved)
        sampler.update(groups_by_task(observed))
        if moved:
            sampler.forget(moved)  # the task's past groups were of another level
        metrics = env_metrics(records)
        holes, warnings = reward_holes(observed)  # dropped groups too: a hole's all-full-marks groups are flat
        metrics.update(holes), hold_for_step(self.logger, reward_holes=warnings)
        metrics.update(curriculum_metrics(curriculum.levels()))
        metrics.update(sampler.metrics())
        metrics["sampling/observed_zero_variance_groups"] = zero_variance_fraction(observed)
        metrics["sampling/dropped_groups"] = float(len({(r.task, r.group) for r in dropped}))
        metrics["sampling/dropped_read_failures"] = float(self.dropped_read_failures)
        for key, count in sorted(self.train_dataset.stream.stats.items()):
            metrics[f"env/{key}"] = float(count)  # e.g. env/filtered_long_prompt/<task>, cumulative
        metrics["timing/data"] = self.train_dataset.pop_seconds()
        return metrics


@register_trainer(TRAINER_NAME)
class ReasoningGymTrainer(ReasoningGymAdditions, FaultHooks, PPOTrainerSync):
    """verl's sync trainer on the task stream."""


@register_trainer(ASYNC_TRAINER_NAME)
class ReasoningGymAsyncTrainer(ReasoningGymAdditions, FaultHooks, PPOTrainerColocateAsync):
    """verl's colocated async trainer on the task stream."""

    name = ASYNC_TRAINER_NAME


def carried_over_metrics(tags: list[dict], global_steps: int) -> dict[str, float]:
    """async/carried_over: the share of a step's responses begun under weights older than the step's (verl's
    `min_global_steps`, the weights a response's first token was sampled with; the step trains weights
    `global_steps - 1`); async/resumed: the share continued across a weight update (partial rollout)."""
    tags = [tag for tag in tags if not tag.get("is_padding", False) and tag.get("min_global_steps") is not None]
    if not tags:
        return {}
    carried = sum(int(tag["min_global_steps"]) < global_steps - 1 for tag in tags)
    resumed = sum(int(tag["max_global_steps"]) > int(tag["min_global_steps"]) for tag in tags)
    return {"async/carried_over": carried / len(tags), "async/resumed": resumed / len(tags)}


def read_records(keys: list[str], partition_id: str, max_response_length: int | None = None
                 ) -> tuple[list, dict[str, float]]:
    """Reads the step's responses from TransferQueue in one query; returns their SampleRecords (uid, extra_info,
    reward extra info, score, token length, cut at `max_response_length` or not) and timing/reward_{mean,max}.

    timing/reward_* are seconds from a response's scoring request to its score (Ray queueing included), as verl's
    agent loop measured them; scoring overlaps generation, so the max, not a sum, is what compares with the step.
    Non-tensor fields read by key come back as tensordict `LinkedList`s (no `.tolist()`): read them with list().
    """
    data = tq.kv_batch_get(keys=keys, partition_id=partition_id,
                           select_fields=["uid", "extra_info", "extra_fields", "rm_scores", "responses", "metrics"])
    scores = data["rm_scores"].sum(dim=1).tolist()
    lengths = data["responses"].offsets().diff().tolist()
    uids, extra_infos, extra_fields = list(data["uid"]), list(data["extra_info"]), list(data["extra_fields"])
    records = []
    for uid, info, fields, score, length in zip(uids, extra_infos, extra_fields, scores, lengths, strict=True):
        records.append(record_from_reward(info.get("task", "unknown"), uid, reward_extra_info(fields), score, length,
                                          max_response_length))
    metrics = [m or {} for m in list(data["metrics"])]
    seconds = [float(m.get("compute_score", 0.0)) for m in metrics]
    timing = {"timing/reward_mean": sum(seconds) / len(seconds), "timing/reward_max": max(seconds)} if seconds else {}
    requests = [float(m["generate_sequences"]) for m in metrics if m.get("generate_sequences") is not None]
    if requests:  # a response's request to the rollout server, sent -> answered (batching and sampling inside)
        timing.update({"timing/rollout_request_min": min(requests), "timing/rollout_request_max": max(requests)})
    return records, timing
