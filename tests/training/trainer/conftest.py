"""The fault tests' fixture: start tiny runs, and kill every process they left when the test ends."""

import pytest

from tests.training.trainer.fault_run import Run


@pytest.fixture
def run_factory():
    runs_started: list[Run] = []

    def start(*args, **kwargs) -> Run:
        runs_started.append(Run(*args, **kwargs))
        return runs_started[-1]

    yield start
    for started in runs_started:
        started.kill_all()
