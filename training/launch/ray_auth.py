"""Ray's token authentication, as a launch that joins a running cluster meets it.

Ray 2.60's `ray start --head` turns token authentication on whenever the machine has a token (~/.ray/auth_token, which
every local `ray.init` writes). A driver in a shell without `RAY_AUTH_MODE=token` then sends no token; `ray.init`
retries for 26 s and raises "Failed to connect to Ray cluster", as if none answered. So before anything else starts,
`auth_problem` asks the cluster's GCS once with Ray's own gRPC channel (which adds the token exactly when `ray.init`
would): an UNAUTHENTICATED answer is a refusal, named in one line with the fix; anything else is left to the
reachability check and `ray.init`.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, open_dict

AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
PROBE_SECONDS = 5.0
FIX = ("Fix: export RAY_AUTH_MODE=token with the cluster's token (`ray get-auth-token` on the head prints it) in "
       "~/.ray/auth_token, RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH; or, on a trusted network only, start every node "
       "of the cluster with RAY_AUTH_MODE=disabled")


def gcs_address(address: str) -> str | None:
    """HOST:PORT of the cluster's GCS for `address` (`auto`: the cluster `ray start` recorded on this machine), or None
    when there is none to ask (a `ray://` client address, or no recorded cluster: ray.init says so itself)."""
    if "://" in address:
        return None
    if address != "auto":
        return address
    from ray._private.services import canonicalize_bootstrap_address

    try:
        return canonicalize_bootstrap_address(address)
    except (ConnectionError, ValueError, OSError):
        return None


def token_source() -> str:
    """Where Ray reads this process's token from, in its own order: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return f"RAY_AUTH_TOKEN_PATH={os.environ['RAY_AUTH_TOKEN_PATH']}"
    return str(Path.home() / ".ray" / "auth_token")


def ask_gcs(address: str, timeout_s: float) -> tuple[str, str]:
    """Asks the GCS at HOST:PORT for its cluster id through Ray's gRPC channel (with the token when this process's
    RAY_AUTH_MODE is token); returns ("OK", "") or the gRPC status name and its details."""
    import grpc
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    channel = init_grpc_channel(address)
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
        return "OK", ""
    except grpc.RpcError as err:
        return err.code().name, str(err.details())
    finally:
        channel.close()


def auth_problem(address: str, timeout_s: float = PROBE_SECONDS) -> str | None:
    """One line naming why the cluster at `address` refuses this driver's authentication, with the fix; None when it
    accepts it, or when there is no answer to read (an absent cluster is the reachability check's to name)."""
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    from ray.exceptions import AuthenticationError

    target = gcs_address(address)
    if target is None:
        return None
    if address == "auto":  # ray.init turns token mode on for `auto` when this machine has a token: so do we
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    try:
        code, details = ask_gcs(target, timeout_s)
    except AuthenticationError as err:  # token mode, but the token cannot be read (Ray names the file)
        return (f"this driver joins the Ray cluster at {address} in token mode but cannot read its token: "
                f"{err.message.split('. ')[0]}. {FIX}")
    if code != "UNAUTHENTICATED":
        return None
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
        why = f"this driver sent none (RAY_AUTH_MODE is {os.environ.get('RAY_AUTH_MODE', 'unset')}, not token)"
    else:
        why = f"the token this driver sent (from {token_source()}) is not the cluster's"
    return (f"the Ray cluster at {address} answers but refuses this driver ({details.strip() or code}): it uses "
            f"token authentication and {why}. {FIX}")


def forward_auth_mode(cfg: DictConfig) -> None:
    """Gives every Ray worker of the run the driver's RAY_AUTH_MODE (ray_init.runtime_env.env_vars), when it is set.

    The token itself is not forwarded: Ray's runtime-env agent logs each runtime env verbatim ("Creating runtime env:
    ..." in runtime_env_agent.log on every node), and a RAY_AUTH_TOKEN_PATH of the driver's machine makes Ray raise
    in a worker on a node without that file. A worker reads its node's token, which the node needed to join; the
    processes the launch itself starts inherit the driver's whole environment."""
    if "RAY_AUTH_MODE" not in os.environ:
        return
    with open_dict(cfg):
        ray_init = cfg.ray_kwargs.ray_init
        ray_init.setdefault("runtime_env", {})
        env_vars = dict(ray_init.runtime_env.get("env_vars") or {})
        env_vars.setdefault("RAY_AUTH_MODE", os.environ["RAY_AUTH_MODE"])
        ray_init.runtime_env.env_vars = env_vars
