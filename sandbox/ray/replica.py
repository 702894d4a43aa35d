"""The sandbox as a Ray Serve deployment: on each node that carries the ``sandbox`` resource, one
replica runs the same app as ``sandbox serve`` (``sandbox.api.create_app``) on that node's
runtimes. Ray Serve's proxies are the URL, its router (``router.py``) the load balancer.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import AsyncIterator
from urllib.parse import urlencode

import ray
from fastapi import Request, Response
from fastapi.responses import StreamingResponse
from ray import serve
from ray.exceptions import ActorUnavailableError, RayActorError
from ray.serve.config import RequestRouterConfig

from ..api.app import create_app
from ..config import Settings
from .compiles import RayCompiles

log = logging.getLogger("sandbox.ray")

DEPLOYMENT = "sandbox"
APP = "sandbox"
# A node runs sandbox replicas only when it carries this resource (`ray start --resources
# '{"sandbox": 1}'`): CPU nodes, not the GPU nodes that train.
NODE_RESOURCE = "sandbox"
# Set on a call the router already sent by its session id: a second miss means the owner is gone.
SERVE_SESSION_HEADER = "x-session-id"
# How long a replica waits for each other one's part of a cluster-wide listing.
ASK_OTHERS_WAIT_S = 10.0
# Not re-sent with a call: the hop's own (and the id, which the re-sending replica sets).
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive",
               "upgrade", "te", "trailer", SERVE_SESSION_HEADER}
# Ray workers run uvloop when it is installed (uvicorn[standard] brings it); its pipe transports
# close a descriptor twice (sandbox/cli.py, EVENT_LOOP), which under load broke session calls
# here with EBADF. The replicas run asyncio's own loop. Two of Serve's per-call costs cut as
# its throughput-optimized mode cuts them: the app runs on Serve's loop (one thread hop less a
# call; the app keeps its loop free, as under uvicorn) and access logs are buffered.
# Serve's gRPC calls (the handle API's, a session call re-sent to its owner) are capped at 4 MiB a
# message by default: a program, its stdin or files, a batch's chunk or an answer past that
# failed with gRPC's RESOURCE_EXHAUSTED. A request is bounded by SANDBOX_MAX_BODY_BYTES instead.
GRPC_MAX_MESSAGE_BYTES = 2**31 - 1  # gRPC's largest
REPLICA_ENVIRONMENT = {"RAY_USE_UVLOOP": "0", "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0",
                       "RAY_SERVE_REQUEST_PATH_LOG_BUFFER_SIZE": "1000",
                       "RAY_SERVE_REPLICA_GRPC_MAX_MESSAGE_LENGTH": str(GRPC_MAX_MESSAGE_BYTES)}


class SandboxReplica:
    """One node's server. Its name in session ids is its Serve replica id (what the router reads);
    its instance (folders, cgroups, leftovers swept at start) is its node's, so that a replica
    replacing a dead one on the same node removes what the dead one left."""

    def __init__(self, settings: dict | None = None) -> None:
        if _on_uvloop():
            raise RuntimeError("the sandbox replica runs on uvloop, whose pipes close "
                               "descriptors twice; start it with RAY_USE_UVLOOP=0")
        context = serve.get_replica_context()
        node = ray.get_runtime_context().get_node_id()
        self.node_id = node
        self.name = context.replica_id.unique_id
        self.app_name = context.app_name
        self.settings = Settings(**{**(settings or {}), "replica": self.name,
                                    "instance": f"ray-{node[:12]}"})
        log.info("sandbox replica %s on node %s (pid %d)", self.name, node[:12], os.getpid())

    def __serve_build_asgi_app__(self):
        app = self.asgi_app = create_app(self.settings)
        app.state.services.reach_owner = self._reach_owner
        app.state.services.ask_other_replicas = self._ask_other_replicas
        cache = app.state.services.engine.compile_cache
        if cache is not None:  # one compile per program in the cluster (compiles.py)
            cache.shared = RayCompiles(wait_s=self.settings.max_timeout_s + 5)
        # The handle API's calls are the cluster's own: they carry the key themselves.
        self.own_headers = {"authorization": f"Bearer {self.settings.api_key.get_secret_value()}"} \
            if self.settings.api_key else {}
        return app

    async def call(self, method: str, path: str, body: bytes | None = None,
                   headers: dict | None = None, params: dict | None = None
                   ) -> tuple[int, dict[str, str], bytes]:
        """One request through this replica's app, in process: what the handle API and the
        health check use. Answers (status, headers, body)."""
        answer = self.stream(method, path, body, {**self.own_headers, **(headers or {})},
                             params or {})
        try:
            status, answer_headers = await answer.__anext__()
            return status, answer_headers, b"".join([chunk async for chunk in answer])
        finally:
            await answer.aclose()

    async def call_many(self, calls: list[tuple[str, str, bytes | None, dict | None]]
                        ) -> list[tuple[int, dict[str, str], bytes]]:
        """Several requests in one handle call, run at once (the handle API's batches): Ray's
        own cost per call, ~2 ms of CPU between caller and replica, paid once for them all."""
        return list(await asyncio.gather(*(self.call(method, path, body, headers)
                                           for method, path, body, headers in calls)))

    async def stream(self, method: str, path: str, body: bytes | None, headers: dict,
                     params: dict) -> AsyncIterator:
        """One request through this replica's app, in process, answered as it is made: first
        (status, headers), then the body's chunks (a streamed E2B command's output as it
        comes). What a session call re-sent to its owner uses, with the client's headers."""
        replies: asyncio.Queue = asyncio.Queue()
        over = asyncio.Event()
        unread = [{"type": "http.request", "body": body or b"", "more_body": False}]

        async def receive():
            if unread:
                return unread.pop()
            await over.wait()
            return {"type": "http.disconnect"}

        async def run():
            try:
                await self.asgi_app(_scope(method, path, headers, params), receive, replies.put)
            finally:
                replies.put_nowait(None)

        task = asyncio.create_task(run())
        try:
            start = await replies.get()
            if start is None:
                await task  # its exception
                raise RuntimeError(f"{method} {path} ended without an answer")
            yield start["status"], {k.decode("latin-1"): v.decode("latin-1")
                                    for k, v in start.get("headers", ())}
            while (message := await replies.get()) is not None:
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body", False):
                    break
        finally:
            over.set()  # the caller went away, or the answer is complete: the app sees the end
            if not task.done():
                task.cancel()

    async def _reach_owner(self, request: Request, session_id: str) -> Response | None:
        """A session call (or an E2B sandbox's) that arrived without the router knowing its
        session (an HTTP client that sends the id only in the path, the body or a header of
        its own): re-send it by its id, once, its answer streamed back as the owner makes it."""
        if request.headers.get(SERVE_SESSION_HEADER) == session_id:
            return None  # the router already tried the owner: it is gone
        handle = serve.get_deployment_handle(DEPLOYMENT, app_name=self.app_name)
        headers = {k: v for k, v in request.headers.items() if k not in HOP_HEADERS}
        headers[SERVE_SESSION_HEADER] = session_id
        owner = handle.options(session_id=session_id, stream=True, _by_reference=False)
        answer = owner.stream.remote(request.method, request.url.path, await request.body(),
                                     headers, dict(request.query_params))
        try:
            status, answer_headers = await answer.__anext__()
        except (RayActorError, ActorUnavailableError, StopAsyncIteration):
            return None  # the owner died during the call: lost with it (410)
        # The owner's x-sandbox-replica stays: the replica that ran the call.
        keep = {k: v for k, v in answer_headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection",
                                     "x-request-id")}
        return StreamingResponse(_chunks(answer), status_code=status, headers=keep)

    async def _ask_other_replicas(self, method: str, path: str, params: dict, headers: dict
                                  ) -> list[tuple[int, bytes]]:
        """Each other replica's answer to one call, asked through the router by its name (a
        replica lost meanwhile: some other answers for it, or none)."""
        names = await asyncio.to_thread(replica_names)
        handle = serve.get_deployment_handle(DEPLOYMENT, app_name=self.app_name)
        calls = [asyncio.wait_for(handle.options(
                     session_id=addressed_to(name), _by_reference=False).call.remote(
                     method, path, None, headers, params), ASK_OTHERS_WAIT_S)
                 for name in names if name != self.name]
        answers = await asyncio.gather(*calls, return_exceptions=True)
        return [(status, body) for status, _, body in
                (a for a in answers if not isinstance(a, BaseException))]

    async def node(self) -> tuple[str, str]:
        """(this replica's name, its node's id)."""
        return self.name, self.node_id

    async def check_health(self) -> None:
        """Serve replaces a replica that raises here: its backend cannot run programs."""
        status, _, body = await self.call("GET", "/readyz")
        if status != 200:
            raise RuntimeError(f"sandbox replica {self.name} not ready: {body[:500]!r}")


def replica_names() -> list[str]:
    """The names (as in session ids) of the deployment's replicas, running or starting."""
    prefix = f"SERVE_REPLICA::{APP}#{DEPLOYMENT}#"
    return [actor["name"].rsplit("#", 1)[1]
            for actor in ray.util.list_named_actors(all_namespaces=True)
            if actor["name"].startswith(prefix)]


def addressed_to(replica: str) -> str:
    """A session id that the router (router.py) sends to ``replica``: for a call that must
    reach one replica by its name, not a session."""
    return f"{replica}-{'0' * 24}"


async def _chunks(answer) -> AsyncIterator[bytes]:
    try:
        async for chunk in answer:
            yield chunk
    except (RayActorError, ActorUnavailableError):
        return  # the owner died mid-answer: the client sees the answer end early


def _scope(method: str, path: str, headers: dict, params: dict) -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
            "root_path": "", "query_string": urlencode(params).encode(),
            "headers": [(k.lower().encode("latin-1"), str(v).encode("latin-1"))
                        for k, v in headers.items()],
            "client": ("127.0.0.1", 0), "server": ("replica", 80)}


def _on_uvloop() -> bool:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:
            return type(asyncio.get_event_loop_policy()).__module__.startswith("uvloop")
    return type(loop).__module__.startswith("uvloop")


def sandbox_deployment(*, min_replicas: int, max_replicas: int, max_ongoing_requests: int,
                       target_ongoing_requests: float):
    """The deployment, its replicas placed one per sandbox node and scaled on their queues."""
    ingress = serve.ingress()(SandboxReplica)
    return serve.deployment(
        name=DEPLOYMENT,
        ray_actor_options={"num_cpus": 0, "resources": {NODE_RESOURCE: 0.001},
                           "runtime_env": {"env_vars": REPLICA_ENVIRONMENT}},
        max_replicas_per_node=1,
        max_ongoing_requests=max_ongoing_requests,
        autoscaling_config={"min_replicas": min_replicas, "max_replicas": max_replicas,
                            "initial_replicas": min_replicas,
                            "target_ongoing_requests": target_ongoing_requests,
                            "upscale_delay_s": 5, "downscale_delay_s": 300},
        request_router_config=RequestRouterConfig(
            request_router_class="sandbox.ray.router:SessionOwnerRouter"),
        health_check_period_s=10, health_check_timeout_s=30,
        graceful_shutdown_timeout_s=60,
    )(ingress)
