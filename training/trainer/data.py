"""The data verl trains and validates on: the envs task stream and the fixed validation set, as dataloaders.

verl's own dataloader setup needs a map-style dataset with a length; a stream has neither length nor epochs, so the
trainer builds its dataloaders here. Reads: env.* (mix, seed, system_prompt, validation_size, on_long_prompt),
data.train_batch_size, data.gen_batch_size, data.max_prompt_length.
"""

from __future__ import annotations

import time

from omegaconf import DictConfig
from torch.utils.data import IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader
from verl.utils.dataset.rl_dataset import collate_fn


class TimedStream(IterableDataset):
    """Wraps a TaskStream to measure the seconds spent producing items (logged as timing/data).

    Everything else (state_dict, load_state_dict, curriculum, sampler) is the stream's own, so data.pt holds the stream state.
    """

    def __init__(self, stream):
        self.stream = stream
        self.seconds = 0.0

    @property
    def curriculum(self):
        return self.stream.curriculum

    @property
    def sampler(self):
        return self.stream.sampler

    def __iter__(self):
        iterator = iter(self.stream)
        while True:
            start = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                self.seconds += time.perf_counter() - start
            yield item

    def pop_seconds(self) -> float:
        """Returns the seconds spent since the last call and resets the counter."""
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    def state_dict(self) -> dict:
        return self.stream.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.stream.load_state_dict(state)


def load_env_mix(cfg: DictConfig):
    """Returns the envs Mix named by env.mix (configs/mix/NAME.yaml or a path)."""
    from envs.mix import load_mix, mix_path

    return load_mix(mix_path(cfg.env.mix))


def chat_template_kwargs(cfg: DictConfig) -> dict:
    """The chat template's options verl's agent loop renders with (data.apply_chat_template_kwargs, e.g.
    enable_thinking): the stream renders with the same, so prompt lengths and `prompt_opens_think` are the rollout's."""
    from omegaconf import OmegaConf

    kwargs = cfg.data.get("apply_chat_template_kwargs")
    return OmegaConf.to_container(kwargs, resolve=True) if OmegaConf.is_config(kwargs) else dict(kwargs or {})


def build_train_stream(cfg: DictConfig, tokenizer) -> TimedStream:
    """Returns the training TaskStream (train split, env.seed) that filters or refuses over-long prompts."""
    from envs.stream import TaskStream

    stream = TaskStream(
        load_env_mix(cfg),
        split="train",
        seed=int(cfg.env.seed),
        system_prompt=cfg.env.system_prompt,
        tokenizer=tokenizer,
        max_prompt_length=int(cfg.data.max_prompt_length),
        on_long_prompt=str(cfg.env.on_long_prompt),
        producer_processes=cfg.env.get("producer_processes"),
        chat_template_kwargs=chat_template_kwargs(cfg),
    )
    stream.start()  # spawn the producer processes now, while verl builds the workers
    return TimedStream(stream)


def build_validation_items(cfg: DictConfig, tokenizer) -> list[dict]:
    """Returns the fixed validation list from the validation split: env.validation_size items of the mix, then
    env.validation_size // 2 items per held-out task (default config), so verl logs held-out accuracy per task too."""
    from envs.stream import build_validation_set

    kwargs = dict(seed=int(cfg.env.seed), system_prompt=cfg.env.system_prompt, tokenizer=tokenizer,
                  max_prompt_length=int(cfg.data.max_prompt_length), chat_template_kwargs=chat_template_kwargs(cfg))
    mix = load_env_mix(cfg)
    items = build_validation_set(mix, int(cfg.env.validation_size), **kwargs)
    held_out_size = int(cfg.env.validation_size) // 2
    for task in mix.held_out:
        items += build_validation_set({"tasks": {task: {"weight": 1.0}}}, held_out_size, **kwargs)
    return items


def build_train_dataloader(dataset: IterableDataset, batch_size: int) -> StatefulDataLoader:
    """Returns the stateful training loader: no workers, so the stream (and its curriculum) stay in this process."""
    return StatefulDataLoader(dataset=dataset, batch_size=batch_size, num_workers=0, collate_fn=collate_fn)


def build_val_dataloader(items: list[dict]) -> StatefulDataLoader:
    """Returns the validation loader: the whole fixed list in one batch, in order (verl sends it as one batch)."""
    return StatefulDataLoader(dataset=items, batch_size=max(len(items), 1), shuffle=False, drop_last=False,
                              num_workers=0, collate_fn=collate_fn)
