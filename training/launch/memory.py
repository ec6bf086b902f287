"""GPU memory: `env.gpu_memory=GB` fits the model preset to a card of GB per GPU.

A model preset (configs/model/*.yaml) is sized for one card size, `env.memory.sized_for` (80 for the Qwen2.5 presets),
and lists settings for smaller cards under `env.memory.smaller` ({GB: {dotted key: value}}: micro batches, offload,
vLLM's share of the card). `env.gpu_memory=40` applies the largest listed size <= 40 (here 24); a card at least as
large as `sized_for` needs nothing. A card smaller than every size the preset lists is refused before anything
starts, with what to change. A new preset uses the mechanism by writing its own `env.memory` block.
"""

from __future__ import annotations

from omegaconf import DictConfig

from training.launch.hardware import set_dotted_keys


def memory_settings(cfg: DictConfig) -> tuple[int | None, dict]:
    """Returns (the card size whose settings apply, those settings) for `env.gpu_memory`; (None, {}) when it is unset
    or the preset's own sizes fit. Raises ValueError when the card is smaller than every size the preset lists."""
    card = cfg.env.get("gpu_memory")
    if card is None:
        return None, {}
    if isinstance(card, bool) or not isinstance(card, (int, float)) or card <= 0:
        raise ValueError(f"env.gpu_memory={card!r}: give the memory of one GPU in GB, e.g. env.gpu_memory=24")
    memory = cfg.env.get("memory") or {}
    sized_for = memory.get("sized_for")
    if sized_for is None:
        raise ValueError("env.gpu_memory is set but the model preset has no env.memory.sized_for: say in the preset "
                         "which card size its settings fit (configs/model/qwen2.5-1.5b.yaml shows how)")
    if card >= sized_for:
        return None, {}
    smaller = {int(size): dict(settings) for size, settings in dict(memory.get("smaller") or {}).items()}
    fitting = [size for size in smaller if size <= card]
    if not fitting:
        model = cfg.actor_rollout_ref.model.path
        listed = ", ".join(str(size) for size in sorted(smaller, reverse=True)) or "none"
        raise ValueError(f"env.gpu_memory={card:g}: the model preset of {model} is sized for {sized_for} GB per GPU "
                         f"and lists settings for {listed} GB (env.memory.smaller); pick a smaller model "
                         "(model=PRESET), or add settings for this card under env.memory.smaller")
    size = max(fitting)
    return size, smaller[size]


def apply_gpu_memory(cfg: DictConfig, command_line: set[str] = frozenset()) -> tuple[int | None, dict]:
    """Applies `memory_settings` (keys given on the command line win); returns the size applied and what it set."""
    size, settings = memory_settings(cfg)
    if size is None:
        return None, {}
    return size, set_dotted_keys(cfg, settings, f"env.memory.smaller.{size}", f"a {size} GB card", command_line)
