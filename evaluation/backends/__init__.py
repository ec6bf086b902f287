"""Generation backends (vLLM, HF transformers, OpenAI-compatible HTTP), built by name or dotpath."""

from evaluation.backends.base import Backend, Completion, GenRequest, build_backend

__all__ = ["Backend", "Completion", "GenRequest", "build_backend"]
