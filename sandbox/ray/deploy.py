"""Start and stop the sandbox application on a running Ray cluster."""

from __future__ import annotations

import logging
import time

import ray
from ray import serve

from . import compiles
from .replica import (APP, DEPLOYMENT, NODE_RESOURCE, addressed_to, replica_names,
                      sandbox_deployment)

log = logging.getLogger("sandbox.ray")

# Serve passes requests on and our server queues them (its admission, its 504): Serve's own
# per-replica cap only has to stay out of the way.
MAX_ONGOING_REQUESTS = 1024
# The cluster's shared compile cache (compiles.py): compiled programs are small (KBs to a few MB).
COMPILES_MB = 1024


class DeployError(RuntimeError):
    """The cluster cannot run the sandbox as asked; the message says what to change."""


def sandbox_nodes() -> list[dict]:
    """The live nodes that carry the ``sandbox`` resource."""
    return [node for node in ray.nodes()
            if node.get("Alive") and node.get("Resources", {}).get(NODE_RESOURCE)]


def deployed() -> bool:
    """Whether the sandbox application is on this cluster (``serve.status`` answers without
    starting Serve, which a cluster never deployed to does not run)."""
    return APP in serve.status().applications


def replicas() -> dict[str, str]:
    """The running sandbox replicas: replica name (as in session ids) -> node id, each asked
    through the router by its name. DeployError when the application is not deployed."""
    if not deployed():
        raise DeployError(f"the {APP!r} application is not deployed on this Ray cluster; "
                          f"`sandbox ray deploy` starts it")
    handle = serve.get_deployment_handle(DEPLOYMENT, app_name=APP)
    answers = {name: handle.options(session_id=addressed_to(name)).node.remote()
               for name in replica_names()}
    found = {}
    for name, answer in answers.items():
        try:
            replica, node = answer.result(timeout_s=30)
        except Exception:  # stopping, or on a node being lost: not running
            continue
        found[replica] = node
    return found


def deploy(address: str | None = None, *, settings: dict | None = None, host: str = "127.0.0.1",
           port: int = 8000, min_replicas: int | None = None, max_replicas: int | None = None,
           target_ongoing_requests: float = 8, wait_s: float = 300) -> str:
    """Deploy (or update) the sandbox application; returns the URL of this node's proxy.

    ``settings`` are server settings (``docs/configuration.md`` names, e.g. ``{"max_concurrency":
    8}``) for every replica, over each node's own SANDBOX_* environment. Replicas: one per
    sandbox node to begin with (``min_replicas``, default: the sandbox nodes now), scaled on
    their queues (``target_ongoing_requests`` per replica) up to ``max_replicas`` (default:
    four times as many), at most one per node: a node added later gets one when the load asks.
    """
    if not ray.is_initialized():
        ray.init(address=address or "auto", log_to_driver=False)
    nodes = sandbox_nodes()
    if not nodes:
        raise DeployError(f"no node of this Ray cluster carries the {NODE_RESOURCE!r} resource; "
                          f"start the sandbox nodes with `ray start --address ... --resources "
                          f"'{{\"{NODE_RESOURCE}\": 1}}'`")
    low = min_replicas or len(nodes)
    high = max(max_replicas or 4 * len(nodes), low)
    serve.start(http_options={"host": host, "port": port, "location": "EveryNode"})
    compiles.start(COMPILES_MB << 20)
    application = sandbox_deployment(
        min_replicas=low, max_replicas=high, max_ongoing_requests=MAX_ONGOING_REQUESTS,
        target_ongoing_requests=target_ongoing_requests).bind(settings or {})
    log.info("deploying %s on %d sandbox node(s): %d to %d replicas", APP, len(nodes), low, high)
    try:
        serve.run(application, name=APP, route_prefix="/", blocking=False)
    except RuntimeError as exc:  # Serve's "Deploying application ... failed"
        raise DeployError(f"{exc}; the replicas' logs say why (ray logs, or "
                          f"/tmp/ray/session_latest/logs/serve/)") from exc
    _wait_running(wait_s)
    return f"http://{host}:{port}"


def _wait_running(wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        status = serve.status().applications.get(APP)
        state = str(status.status) if status else "NOT_STARTED"
        if state.endswith("RUNNING"):
            return
        if state.endswith("DEPLOY_FAILED") or time.monotonic() > deadline:
            message = status.message if status else "the application was not created"
            raise DeployError(f"{APP} is {state} after {wait_s:g} s: {message}")
        time.sleep(1)


def stop(address: str | None = None) -> bool:
    """Delete the sandbox application; its replicas stop and remove their sandboxes. False when
    it was not deployed (nothing to delete)."""
    if not ray.is_initialized():
        ray.init(address=address or "auto", log_to_driver=False)
    found = deployed()
    if found:  # serve.delete raises when Serve itself never ran here
        serve.delete(APP)
    compiles.stop()
    return found
