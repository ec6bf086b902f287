"""Keeps the root logger's level when vLLM's server modules are imported.

vLLM's OpenAI server imports `model_hosting_container_standards`, whose import sets the root logger to ERROR (its
`LOG_LEVEL` default) and raises every root handler to that level. Whatever process imports verl's vLLM server module
(the Ray task runner that builds the rollout replicas, on a GPU and on a CPU) then drops every warning of ours, e.g. a
generation dump that failed. Importing it once here, with the root logger's settings put back afterwards, makes the
later imports no-ops: Python imports a module once per process.
"""

from __future__ import annotations

import importlib
import logging

CULPRIT = "model_hosting_container_standards.logging_config"


def import_keeping_root_logging(module: str = CULPRIT) -> bool:
    """Imports `module` and restores the root logger's and its handlers' levels; False when it is not installed."""
    root = logging.getLogger()
    level, handler_levels = root.level, [(handler, handler.level) for handler in root.handlers]
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    finally:
        root.setLevel(level)
        for handler, handler_level in handler_levels:
            handler.setLevel(handler_level)
    return True
