"""Progress of the CPU rollout's decoding: a bar per batch that runs long enough to be worth one, drawn by the
driver when the server is a Ray actor."""

from __future__ import annotations

import time

import ray
import torch


def progress_bar(total: int, desc: str):
    """Returns a tqdm-like bar: Ray's tqdm_ray inside an actor (the driver draws it in its terminal; a plain tqdm in
    an actor would reach the driver as broken lines), plain tqdm elsewhere."""
    if ray.is_initialized() and ray.get_runtime_context().get_actor_id():
        from ray.experimental.tqdm_ray import tqdm as ray_tqdm

        return ray_tqdm(total=total, desc=desc, unit="tok", flush_interval_s=0.0)
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tok", leave=False)


class DecodeProgress:
    """Progress of one batch's decode loop: tokens decoded of the batch's max new tokens, and sequences finished.

    Counts the model's forward calls through a forward hook (the first call of a batch is the prefill, each later one
    feeds back one sampled token per row), so the loop itself does no extra work. The bar appears once a batch has
    run `seconds` (quick batches show nothing) and refreshes every `seconds`; only then does it count the finished
    rows: those whose fed-back token is EOS or padding (a row stopped by its own token limit counts one step late).
    `seconds` <= 0: off, no hook. Used from one thread at a time (the server samples one batch at a time).
    """

    def __init__(self, model, seconds: float, label: str, stop_tokens: set[int]):
        self.seconds, self.label = float(seconds), label
        self.stop_tokens = torch.tensor(sorted(stop_tokens))
        self.bar, self.active, self.calls, self.rows, self.total, self.shown = None, False, 0, 0, 0, 0.0
        if self.seconds > 0:
            model.register_forward_hook(self._on_forward, with_kwargs=True)

    def start(self, rows: int, max_new_tokens: int) -> None:
        self.bar, self.active, self.calls, self.rows, self.total = None, self.seconds > 0, 0, rows, max_new_tokens
        self.shown = time.monotonic()  # the bar appears `seconds` after the batch starts

    def _on_forward(self, module, args, kwargs, output) -> None:
        if not self.active:
            return
        self.calls += 1
        now = time.monotonic()
        if self.calls > 1 and now - self.shown >= self.seconds:
            self.shown = now
            if self.bar is None:  # appears at 0, so that the driver's bar measures the rate from here
                self.bar = progress_bar(self.total, f"{self.label}: {self.rows} seqs")
                self.bar.refresh()
                return
            finished = int(torch.isin(kwargs["input_ids"], self.stop_tokens).sum())
            self._show(self.calls - 1, f"{finished}/{self.rows} seqs done")

    def _show(self, decoded: int, status: str) -> None:
        self.bar.n = decoded
        self.bar.set_description(f"{self.label}: {status}")  # draws the bar (from an actor: one line to the driver)

    def finish(self, sampled) -> None:
        """Shows the batch's final count and closes its bar, if it had one."""
        self.active = False
        if self.bar is not None:
            at_eos = sum(s.finished_by_eos for s in sampled)
            self._show(max((len(s.token_ids) for s in sampled), default=0),
                       f"{len(sampled)}/{self.rows} seqs done, {at_eos} at EOS")
            self.bar.close()
            self.bar = None
