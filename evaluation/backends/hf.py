"""HF transformers backend: batched `generate` on CPU (or one GPU); for small models, tests and machines without vLLM."""

from __future__ import annotations

import logging

from evaluation.backends.base import Completion, GenRequest, OnResult
from evaluation.config import ModelConfig, SamplingConfig
from utils.gqa_sdpa import use_gqa_sdpa

log = logging.getLogger(__name__)

DTYPES = {"auto": "auto", "bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


class HFBackend:
    """Left-padded batches of `model.batch_size` prompts, `n` sequences each via num_return_sequences."""

    name = "hf"

    def __init__(self, model_cfg: ModelConfig, sampling: SamplingConfig):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = {"trust_remote_code": model_cfg.trust_remote_code}
        if model_cfg.gguf_file:
            kwargs["gguf_file"] = model_cfg.gguf_file
        self.tokenizer = AutoTokenizer.from_pretrained(model_cfg.path, **kwargs)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = DTYPES.get(model_cfg.dtype, "auto")
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(model_cfg.path, dtype=dtype, **kwargs).to(self.device).eval()
        if self.device == "cpu":
            use_gqa_sdpa(self.model)  # transformers' sdpa, same bits, without copying key/value heads each token
        self.batch_size = max(1, model_cfg.batch_size)
        torch.manual_seed(sampling.seed)

    def _render(self, messages: list) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _generate_batch(self, batch: list[GenRequest], sampling: SamplingConfig) -> list[list[Completion]]:
        import torch

        n = max(len(r.samples) for r in batch)
        enc = self.tokenizer([self._render(r.messages) for r in batch], return_tensors="pt", padding=True,
                             add_special_tokens=False).to(self.device)
        sample = sampling.temperature > 0
        gen_kwargs = {"do_sample": sample, "max_new_tokens": sampling.max_tokens, "num_return_sequences": n,
                      "pad_token_id": self.tokenizer.pad_token_id}
        if sample:
            gen_kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p)
        with torch.no_grad():
            out = self.model.generate(**enc, **gen_kwargs)
        new = out[:, enc["input_ids"].shape[1]:]
        eos = set(self._eos_ids())
        results = []
        for i, req in enumerate(batch):
            comps = []
            for j in range(len(req.samples)):
                ids = new[i * n + j].tolist()
                length = next((p + 1 for p, t in enumerate(ids) if t in eos), None)
                stopped = length is not None
                ids = ids[:length] if stopped else ids
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                comps.append(Completion(text, len(ids), "stop" if stopped else "length"))
            results.append(comps)
        return results

    def _eos_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        ids = eos if isinstance(eos, list) else [eos]
        ids += [self.tokenizer.eos_token_id, self.tokenizer.pad_token_id]
        return [i for i in ids if i is not None]

    def generate(self, requests: list[GenRequest], sampling: SamplingConfig, on_result: OnResult) -> None:
        """Batches of equal sample counts (a resumed run may need fewer samples for some prompts)."""
        by_n: dict[int, list[GenRequest]] = {}
        for req in requests:
            by_n.setdefault(len(req.samples), []).append(req)
        for reqs in by_n.values():
            for start in range(0, len(reqs), self.batch_size):
                batch = reqs[start:start + self.batch_size]
                for req, comps in zip(batch, self._generate_batch(batch, sampling)):
                    on_result(req, comps)

    def close(self) -> None:
        self.model = None


def build_hf_backend(model_cfg: ModelConfig, sampling: SamplingConfig) -> HFBackend:
    """Reads model.path, model.gguf_file, model.dtype, model.batch_size, model.trust_remote_code."""
    return HFBackend(model_cfg, sampling)
