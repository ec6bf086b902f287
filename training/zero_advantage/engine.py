"""The FSDP engine's side of the zero-advantage skip (training/zero_advantage/rules.py says when and why it is exact).

Mixed into the CPU backend's engine (training/cpu_backend/engine.py) and, on CUDA, into verl's FSDP engine through
`register_cuda_engine` (run in every worker: `VERL_USE_EXTERNAL_MODULES=training.zero_advantage.engine`, set by the launch).
"""

from __future__ import annotations

import math

import torch

from training.zero_advantage.rules import DATA_KEY, METRIC_PREFIX, loss_refusal


def _loss_config(loss_function):
    """The ActorConfig verl binds into its loss (`partial(ppo_loss, config=actor_config)`), or None."""
    return getattr(loss_function, "keywords", {}).get("config")


def moving_rows(data) -> torch.Tensor:
    """A bool per row: some response token has a non-zero advantage (NaN counts as non-zero, so it still shows)."""
    advantages, mask = data["advantages"], data["response_mask"]
    if advantages.is_nested:
        advantages = advantages.to_padded_tensor(0.0)
    if mask.is_nested:
        mask = mask.to_padded_tensor(0)
    return ((advantages != 0) & mask.bool()).any(dim=-1)


def all_reduced(values: list[float], op, group) -> list[float]:
    """`values` reduced over `group`, on the device its collectives run on (verl's groups are NCCL on CUDA)."""
    from verl.utils.device import get_device_id

    tensor = torch.tensor(values, dtype=torch.float64, device=get_device_id())
    torch.distributed.all_reduce(tensor, op=op, group=group)
    return tensor.cpu().tolist()


def rows_to_run(moving: torch.Tensor, lengths: torch.Tensor, unit: int, group) -> torch.Tensor:
    """Indices (in order, on the CPU) of the rows to run: the moving ones, topped up with the shortest others to the
    same multiple of `unit` rows on every rank of `group`; empty on every rank when no rank has a moving row."""
    moving, lengths = moving.cpu(), lengths.cpu()
    wanted = all_reduced([math.ceil(int(moving.sum()) / unit)], torch.distributed.ReduceOp.MAX, group)[0]
    count = min(int(wanted) * unit, len(moving))
    still = torch.nonzero(~moving).flatten()
    top_up = still[torch.argsort(lengths[still], stable=True)][:count - int(moving.sum())]
    keep = torch.zeros_like(moving)
    keep[torch.nonzero(moving).flatten()] = True
    keep[top_up] = True
    return torch.nonzero(keep).flatten()


class _WholeBatchTokens:
    """verl's loss with the mini-batch's token count before any row was left out (token-mean divides by it)."""

    def __init__(self, loss_function, batch_num_tokens: int):
        self.loss_function, self.batch_num_tokens = loss_function, batch_num_tokens
        self.keywords = getattr(loss_function, "keywords", {})

    def __call__(self, *args, data, **kwargs):
        from verl.utils import tensordict_utils as tu

        tu.assign_non_tensor(data, batch_num_tokens=self.batch_num_tokens)
        return self.loss_function(*args, data=data, **kwargs)


class ZeroAdvantageSkipMixin:
    """forward_backward_batch over the rows that move the weights; no optimizer step when none does (see the module
    docstring). Without the batch's `skip_zero_advantage` key (evaluation, the reference, the critic), verl's own."""

    _nothing_to_update = False

    def forward_backward_batch(self, data, loss_function, forward_only=False):
        # imported here: verl loads this module while it initialises (VERL_USE_EXTERNAL_MODULES)
        from verl.utils import tensordict_utils as tu
        from verl.workers.engine.utils import postprocess_batch_func

        if forward_only or not tu.get_non_tensor_data(data=data, key=DATA_KEY, default=False):
            return super().forward_backward_batch(data, loss_function, forward_only=forward_only)
        loss_config = _loss_config(loss_function)
        if problem := ("the loss has no ActorConfig to check" if loss_config is None else loss_refusal(loss_config)):
            raise RuntimeError(f"{DATA_KEY} was asked for a loss that gives zero-advantage tokens a gradient "
                               f"({problem}); training/zero_advantage/rules.py skip_refusal should have refused it")
        group = self.get_data_parallel_group()
        lengths = data["input_ids"].offsets().diff().cpu()
        dynamic = tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True)
        unit = 1 if dynamic else int(data["micro_batch_size_per_gpu"]) * int(
            tu.get_non_tensor_data(data=data, key="force_group_size", default=1))
        keep = rows_to_run(moving_rows(data), lengths, unit, group)
        # verl's normaliser and the counts reported, over the whole mini-batch of every rank
        batch_num_tokens, rows, tokens, kept_rows, kept_tokens = all_reduced(
            [float(data["loss_mask"].sum()), len(lengths), float(lengths.sum()), len(keep),
             float(lengths[keep].sum())], torch.distributed.ReduceOp.SUM, group)
        self._nothing_to_update = kept_rows == 0
        if self._nothing_to_update:
            output = postprocess_batch_func(output_lst=[], indices=None, data=data)
        else:
            kept = data if len(keep) == len(lengths) else tu.index_select_tensor_dict(data, keep)
            output = super().forward_backward_batch(kept, _WholeBatchTokens(loss_function, int(batch_num_tokens)),
                                                    forward_only=False)
        output["metrics"].update({f"{METRIC_PREFIX}sequences": [1 - kept_rows / rows],
                                  f"{METRIC_PREFIX}tokens": [1 - kept_tokens / tokens],
                                  f"{METRIC_PREFIX}optimizer_step": [float(self._nothing_to_update)]})
        return output

    def optimizer_step(self):
        if self._nothing_to_update:  # every rank agrees: the counts above are all-reduced
            self._nothing_to_update = False
            return 0.0
        return super().optimizer_step()


def register_cuda_engine() -> None:
    """verl's FSDP language-model engine with the skip, for CUDA on NVIDIA (verl looks (device, vendor) up first)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

    registry = EngineRegistry._engines.get("language_model", {}).get("fsdp", {})
    if ("cuda", "nvidia") in registry:
        return

    class SkippingFSDPEngineWithLMHead(ZeroAdvantageSkipMixin, FSDPEngineWithLMHead):
        """verl's FSDP language-model engine (actor, reference) with the zero-advantage skip."""

    EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device="cuda",
                            vendor="nvidia")(SkippingFSDPEngineWithLMHead)


register_cuda_engine()
