"""Ray's token authentication at launch (training/launch/ray_auth.py), the parts that need no cluster; a real head
started with `ray start --head` refuses and accepts drivers in tests/training/test_ray_cluster.py."""

import socket
import time

from training.launch.config import compose_config
from training.launch.ray_auth import auth_problem, forward_auth_mode, gcs_address, token_source


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_absent_cluster_is_no_authentication_problem_and_is_answered_at_once():
    started = time.monotonic()
    assert auth_problem(f"127.0.0.1:{closed_port()}") is None  # the reachability check names it
    assert time.monotonic() - started < 5
    assert gcs_address("ray://10.0.0.1:10001") is None and auth_problem("ray://10.0.0.1:10001") is None
    assert gcs_address("10.0.0.1:6379") == "10.0.0.1:6379"


def test_the_token_is_named_where_ray_reads_it(monkeypatch, tmp_path):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert token_source() == f"{tmp_path}/.ray/auth_token"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", "/t/token")
    assert token_source() == "RAY_AUTH_TOKEN_PATH=/t/token"
    monkeypatch.setenv("RAY_AUTH_TOKEN", "x" * 32)
    assert token_source() == "RAY_AUTH_TOKEN"  # its value is never printed


def test_the_drivers_auth_mode_reaches_every_worker_and_the_token_stays_out_of_the_runtime_env(monkeypatch):
    cfg = compose_config("quickstart", ["+ray_kwargs.ray_init.runtime_env.env_vars.A=one"])
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    forward_auth_mode(cfg)
    assert dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars) == {"A": "one"}
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    forward_auth_mode(cfg)
    assert dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars) == {"A": "one", "RAY_AUTH_MODE": "token"}

