"""HF transformers backend: batched decoding on CPU (or one GPU); for small models, tests and machines without vLLM.

Greedy decoding on a CPU runs the backend's own loop (`HFBackend._greedy`), sampling runs `generate()`."""

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
        self.chat_template_kwargs = dict(model_cfg.chat_template_kwargs)
        self.drop_stopped_rows = self.device == "cpu"  # greedy: `_greedy`; per-row bits are a CPU GEMM's property
        torch.manual_seed(sampling.seed)

    def _render(self, messages: list) -> str:
        from envs.prompts import render_prompt

        return render_prompt(self.tokenizer, messages, self.chat_template_kwargs)

    def _generate_batch(self, batch: list[GenRequest], sampling: SamplingConfig) -> list[list[Completion]]:
        import torch

        n = max(len(r.samples) for r in batch)
        from envs.prompts import prompt_opens_think

        prompts = [self._render(r.messages) for r in batch]
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        sample = sampling.temperature > 0
        gen_kwargs = {"do_sample": sample, "max_new_tokens": sampling.max_tokens, "num_return_sequences": n,
                      "pad_token_id": self.tokenizer.pad_token_id}
        if sample:
            gen_kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p)
        eos = set(self._eos_ids())
        with torch.no_grad():
            if sample or n > 1 or not self.drop_stopped_rows:
                out = self.model.generate(**enc, **gen_kwargs)
                new = out[:, enc["input_ids"].shape[1]:].tolist()
            else:
                new = self._greedy(enc, sampling.max_tokens, eos)
        results = []
        for i, req in enumerate(batch):
            comps = []
            for j in range(len(req.samples)):
                ids = new[i * n + j]
                length = next((p + 1 for p, t in enumerate(ids) if t in eos), None)
                stopped = length is not None
                ids = ids[:length] if stopped else ids
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                comps.append(Completion(text, len(ids), "stop" if stopped else "length", prompt_opens_think(prompts[i])))
            results.append(comps)
        return results

    def _greedy(self, enc, max_new_tokens: int, eos: set[int]) -> list[list[int]]:
        """Greedy decoding on a CPU that drops each row from the batch once it has stopped (an EOS or pad token).

        transformers' `generate()` decodes a stopped row on to the batch's end: on the quickstart's suite, batches of
        64 did 1.8-2x the row-steps their answers needed. Every row runs the forward `generate()` runs (the same
        prompt batch, positions, mask and KV cache, fewer rows) and takes the argmax of its fp32 logits, so each
        answer is `generate()`'s (tests; the whole suite in `bench/bench_eval_hf.py --compare greedy`).
        """
        import torch

        mask = enc["attention_mask"]
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
        out = self.model(input_ids=enc["input_ids"], attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1)
        cache, token = out.past_key_values, out.logits[:, -1, :].float().argmax(-1)
        stops = torch.tensor(sorted(eos), dtype=token.dtype, device=token.device)
        rows = torch.arange(len(token), device=token.device)  # batch row -> prompt index
        tokens: list[list[int]] = [[] for _ in range(len(token))]
        for step in range(max_new_tokens):
            for row, value in zip(rows.tolist(), token.tolist()):
                tokens[row].append(value)
            running = ~torch.isin(token, stops)
            if step + 1 == max_new_tokens or not bool(running.any()):
                break
            if not bool(running.all()):
                keep = running.nonzero().squeeze(-1)
                cache.batch_select_indices(keep)
                rows, token, mask, positions = rows[keep], token[keep], mask[keep], positions[keep]
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            out = self.model(input_ids=token[:, None], attention_mask=mask, position_ids=positions,
                             past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1, :].float().argmax(-1)
        return tokens

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
