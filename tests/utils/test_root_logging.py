"""vLLM's server import must not silence our warnings (utils/root_logging.py). Each case runs in a fresh process:
Python imports the culprit once per process."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("model_hosting_container_standards") is None,
                                reason="model_hosting_container_standards (a vLLM dependency) is not installed")

_PROBE = """
import logging, sys
logging.basicConfig(level=logging.WARNING)
if sys.argv[1] == "guarded":
    from utils.root_logging import import_keeping_root_logging
    assert import_keeping_root_logging()
import model_hosting_container_standards.logging_config
print(logging.getLogger().level, logging.getLogger().handlers[0].level)
"""


def _root_levels(mode: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-2:]


def test_the_culprit_alone_sets_the_root_logger_to_error():
    assert _root_levels("plain") == ["40", "40"]


def test_imported_through_the_guard_the_root_logger_keeps_its_levels():
    assert _root_levels("guarded") == ["30", "0"]
