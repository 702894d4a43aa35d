"""Operations: request ids, Prometheus metrics at ``GET /metrics``, and the audit log.

``install_observability(app, ...)`` wires it all into an app and returns the ``Observability``
that holds the metrics and the audit log. A middleware (outermost, so 401, 413 and 500 answers
get it too) gives every request an id, returns it in ``X-Request-ID``, and for an audited
endpoint (``Observability.audited_paths``) counts the request and writes one audit line just
before the last byte of the response is sent, so a client that got its answer can already
see it in ``/metrics``.

A handler of an audited endpoint describes its request with ``note_run_request`` (what was
asked) and ``note_run_result`` (what ran); the middleware does the rest, including for requests
that the handler never saw (malformed JSON, body too large, no API key). Other endpoints that
run programs can call ``Observability.observe_request`` and ``Observability.audit.record``.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import logging.handlers
import re
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

try:  # the classic text format by name (newer prometheus-client; Debian's is older)
    from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as METRICS_CONTENT_TYPE
except ImportError:
    from prometheus_client.exposition import CONTENT_TYPE_LATEST as METRICS_CONTENT_TYPE

from ..config import Settings
from ..engine import Engine
from ..engine.models import Job, JobResult, StepStatus

REQUEST_ID_HEADER = "X-Request-ID"
# Echoed into a response header and the audit log: short, and nothing that could split a line.
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
CODE_HEAD_CHARS = 200
# A 5 ms hello world up to the 120 s ceiling on a step.
EXECUTION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
                     60.0, 120.0)
# crun starts one in ~10 ms; a cold `docker create` + start takes ~0.3 s, more under load.
START_BUCKETS = (0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ERROR_KINDS = ("sandbox_unavailable", "image_missing", "backend_error", "overloaded", "files_refused",
               "invalid_request", "request_too_large", "unauthorized", "internal_error")
UNKNOWN_LANGUAGE = "unknown"  # label for a language this server does not serve (bounded labels)
_ERROR_BODY_KEEP = 2048        # bytes of a 4xx/5xx body kept to quote its `detail` in the audit

log = logging.getLogger(__name__)


def accept_request_id(incoming: str | None) -> str:
    """The client's ``X-Request-ID`` when it is a short safe token, else a new random one."""
    if incoming and _SAFE_REQUEST_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


def status_label(http_status: int, verdict: str | None) -> str:
    """The ``status`` label: the verdict when the program ran, else what the HTTP answer was."""
    if http_status == 200 and verdict:
        return verdict
    if http_status == 504:
        return "busy_504"
    if http_status == 499:
        return "client_gone"
    if 400 <= http_status < 500:
        return f"rejected_{http_status}"
    if http_status >= 500:
        return f"error_{http_status}"
    return verdict or f"http_{http_status}"


def error_kind(http_status: int, result_error_kind: str | None) -> str | None:
    """The ``kind`` label of ``sandbox_errors_total`` for a request, or None when it went well."""
    if result_error_kind:
        return result_error_kind
    if http_status == 504:
        return "overloaded"
    if http_status == 401:
        return "unauthorized"
    if http_status == 413:
        return "request_too_large"
    if 400 <= http_status < 500:
        return "invalid_request"
    if http_status >= 500:
        return "internal_error"
    return None


class _EngineGauges:
    """Gauges read from the engine at scrape time: nothing to keep in step with it."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def collect(self) -> Iterable[GaugeMetricFamily]:
        engine = self._engine
        yield GaugeMetricFamily("sandbox_queue_depth", "Requests waiting for a free sandbox.",
                                value=engine.waiting)
        yield GaugeMetricFamily("sandbox_running_containers", "Sandboxes running a job now.",
                                value=engine.running)
        yield GaugeMetricFamily("sandbox_computing_containers",
                                "Of those, the ones using a CPU (the rest sleep or wait); "
                                "admission keeps them at most cpu_slots.",
                                value=engine.admission.computing)
        yield CounterMetricFamily("sandbox_admission_short_changed_seconds",
                                  "Seconds admission let nobody in because a computing sandbox "
                                  "got less than its CPU share on a machine with no CPU idle.",
                                  value=engine.admission.short_changed_s)
        warm = GaugeMetricFamily("sandbox_warm_pool_size",
                                 "docker backend: started, unused containers ready, by image.",
                                 labels=["image"])
        by_image: dict[str, int] = {}
        warm_sizes = getattr(engine.backend, "warm_sizes", None)  # the backend may be swapped
        for key, count in (warm_sizes() if warm_sizes else {}).items():
            image = key.rsplit(" ", 1)[0]  # keys are "IMAGE 1024MB": one pool per image and limits
            by_image[image] = by_image.get(image, 0) + count
        for image, count in sorted(by_image.items()):
            warm.add_metric([image], count)
        yield warm
        templates = getattr(engine.backend, "templates", None)  # oci backend only
        ready = GaugeMetricFamily("sandbox_warm_templates_ready",
                                  "oci backend: warm templates ready to fork runs from (1) or "
                                  "not (0: their runs start cold), by image and module set.",
                                  labels=["image", "set"])
        runs = CounterMetricFamily("sandbox_runs_started",
                                   "oci backend: /run_code runs by how they started: forked "
                                   "from a warm template, or cold.", labels=["start"])
        if templates is not None:
            for template in templates.all():
                ready.add_metric([template.image, template.name], int(template.ready))
            for start, count in templates.runs.items():
                runs.add_metric([start], count)
        yield ready
        yield runs
        cache = engine.compile_cache
        compiles = CounterMetricFamily(
            "sandbox_compiles", "Compile steps by where their result came from: compiled here, "
            "this server's compile cache, or another server's (a cluster's shared cache).",
            labels=["source"])
        if cache is not None:
            compiles.add_metric(["compiled"], cache.misses)
            compiles.add_metric(["cache"], cache.hits - cache.shared_hits)
            compiles.add_metric(["shared"], cache.shared_hits)
        yield compiles


class _SessionGauges:
    """Sessions, read from the registry at scrape time."""

    def __init__(self, sessions) -> None:
        self._sessions = sessions

    def collect(self) -> Iterable:
        sessions = self._sessions
        active = GaugeMetricFamily("sandbox_sessions_active", "Sessions alive now, by language.",
                                   labels=["language"])
        for language, count in sorted(sessions.active_by_language().items()):
            active.add_metric([language], count)
        yield active
        events = CounterMetricFamily(
            "sandbox_sessions", "Sessions created, expired, deleted, forked and restarted "
            "(interpreter started again), by language.", labels=["event", "language"])
        for (event, language), count in sorted(sessions.totals.items()):
            events.add_metric([event, language], count)
        yield events
        memory = [m for s in sessions.sessions() if (m := s.memory_now()) is not None]
        yield GaugeMetricFamily("sandbox_session_memory_bytes",
                                "Memory all session interpreters use now, together.",
                                value=sum(memory))


class _AssetGauges:
    """The asset store, read at scrape time."""

    def __init__(self, store) -> None:
        self._store = store

    def collect(self) -> Iterable:
        store = self._store
        size = GaugeMetricFamily("sandbox_assets_bytes", "Bytes of assets held: uploaded "
                                 "(PUT /v1/assets) and in the operator's asset folder.",
                                 labels=["source"])
        size.add_metric(["uploaded"], store.bytes)
        size.add_metric(["folder"], store.folder_bytes)
        yield size
        entries = GaugeMetricFamily("sandbox_assets_entries", "Assets held, by source.",
                                    labels=["source"])
        entries.add_metric(["uploaded"], store.entries)
        entries.add_metric(["folder"], store.folder_entries)
        yield entries
        uses = CounterMetricFamily("sandbox_asset_uses", "Assets a request named in `files`: "
                                   "found (hit) or not here (miss, a 422).", labels=["result"])
        uses.add_metric(["hit"], store.hits)
        uses.add_metric(["miss"], store.misses)
        yield uses
        yield CounterMetricFamily("sandbox_asset_uploads", "Assets stored by PUT /v1/assets "
                                  "(a re-upload of one held is not counted).", value=store.uploads)
        yield CounterMetricFamily("sandbox_asset_evictions", "Uploaded assets removed to keep "
                                  "the store within SANDBOX_ASSETS_STORE_MB.", value=store.evictions)


class Metrics:
    """This app's Prometheus metrics, in a registry of its own (several apps may share a process)."""

    def __init__(self, engine: Engine) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "sandbox_requests", "Requests to run code, by language and outcome: the verdict "
            "(Success, Failed, SandboxError) or the HTTP refusal (rejected_4xx, busy_504), or client_gone: "
            "its client left while it waited for a sandbox, and it did not run.",
            ["language", "status"], registry=self.registry)
        self.errors = Counter(
            "sandbox_errors", "Requests that failed or were refused, by kind.", ["kind"],
            registry=self.registry)
        for kind in ERROR_KINDS:
            self.errors.labels(kind)  # present at 0, so rate() works from the first scrape
        self.execution_time = Histogram(
            "sandbox_execution_time_seconds", "Wall-clock time of the compile and run steps, and "
            "of the whole request (total, queue wait included); cached compiles are not counted.",
            ["language", "step"], buckets=EXECUTION_BUCKETS, registry=self.registry)
        self.container_start = Histogram(
            "sandbox_container_start_seconds",
            "From asking the backend for a sandbox to having it (warm pool hits included).",
            buckets=START_BUCKETS, registry=self.registry)
        self.resent = Counter(
            "sandbox_calls_resent", "Calls for a session or E2B sandbox that another replica "
            "holds, re-sent to it through the engine in front (Ray Serve), which counts them in "
            "sandbox_requests_total.", registry=self.registry)
        self.session_call_time = Histogram(
            "sandbox_session_call_seconds", "Wall-clock time of a call in a session.",
            ["language"], buckets=START_BUCKETS + (20.0, 30.0, 60.0, 120.0), registry=self.registry)
        self.registry.register(_EngineGauges(engine))
        ProcessCollector(registry=self.registry)  # RSS, CPU, open files of the server

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class AuditLogUnavailable(RuntimeError):
    """The audit log file cannot be opened: the server does not start without its audit."""


class AuditLog:
    """One JSON line per audited request, to stdout or a file; ``"off"``: nothing.

    ``record`` only appends the line to a list; a writer thread writes what has gathered every
    ``FLUSH_S`` in one write, so a slow stdout pipe or disk never holds up the event loop, and
    a request wakes no thread (handing each line through a queue to a waiting thread was ~6%
    of the server's time holding the GIL at 150 requests/s). A file is reopened when logrotate
    moves it (WatchedFileHandler); ``close`` writes what is left."""

    FLUSH_S = 0.05

    def __init__(self, destination: str) -> None:
        self.destination = destination
        self._handler: logging.Handler | None = None
        if destination == "off":
            return
        if destination == "stdout":
            handler: logging.Handler = logging.StreamHandler(sys.stdout)
        else:
            try:
                handler = logging.handlers.WatchedFileHandler(destination, encoding="utf-8")
            except OSError as exc:
                raise AuditLogUnavailable(
                    f"SANDBOX_AUDIT_LOG: cannot append to {destination}: {exc.strerror}") from None
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._handler = handler
        self._lines: list[str] = []
        self._closed = threading.Event()
        self._writer = threading.Thread(target=self._write_every_flush, name="audit-log", daemon=True)
        self._writer.start()
        atexit.register(self.close)  # write what is gathered when the server stops

    @property
    def enabled(self) -> bool:
        return self._handler is not None

    def record(self, fields: dict) -> None:
        if self._handler is None:
            return
        # ASCII-only: any stdout encoding takes it, and odd code (lone surrogates) cannot break it.
        self._lines.append(json.dumps(fields, separators=(",", ":"), default=str))

    def _write_every_flush(self) -> None:
        while not self._closed.wait(self.FLUSH_S):
            self._write_gathered()
        self._write_gathered()

    def _write_gathered(self) -> None:
        if not self._lines:
            return
        # Swapped, not copied: list.append from the event loop and this swap are each atomic.
        lines, self._lines = self._lines, []
        self._handler.handle(logging.makeLogRecord({"msg": "\n".join(lines), "levelno": logging.INFO}))

    def close(self) -> None:
        if self._handler is None or self._closed.is_set():
            return
        self._closed.set()
        self._writer.join()  # its last pass writes what is gathered
        self._handler.close()
        self._handler = None


@dataclass
class RunRecord:
    """What is known about one audited request; filled in by the handler, finished by the middleware."""

    request_id: str
    client: str | None
    method: str
    path: str
    received_at: datetime
    started: float = field(default_factory=time.perf_counter)
    language: str | None = None
    code: str | None = None
    limits: dict | None = None
    verdict: str | None = None
    engine_s: float | None = None
    compile_s: float | None = None
    compile_cached: bool = False
    run_s: float | None = None
    sandbox_id: str | None = None
    result_error_kind: str | None = None
    tests: dict | None = None  # /v1/evaluate: {"passed": n, "total": m}
    session_id: str | None = None
    finished: bool = False


class Observability:
    def __init__(self, settings: Settings, engine: Engine, languages: Iterable[str],
                 aliases: dict[str, str] | None = None) -> None:
        # What a request may name -> the language its metrics count under.
        self.languages = {**{language: language for language in languages}, **(aliases or {})}
        self.settings = settings
        self.metrics = Metrics(engine)
        self.audit = AuditLog(settings.audit_log)
        self.audited_paths = {"/run_code", "/v1/evaluate"}
        engine.on_sandbox_open = self.metrics.container_start.observe

    def watch_sessions(self, sessions) -> None:
        self.metrics.registry.register(_SessionGauges(sessions))

    def watch_assets(self, store) -> None:
        self.metrics.registry.register(_AssetGauges(store))

    def language_label(self, language: str | None) -> str:
        return self.languages.get(language, UNKNOWN_LANGUAGE) if language else UNKNOWN_LANGUAGE

    def observe_request(self, language: str | None, status: str, compile_s: float | None = None,
                        run_s: float | None = None, total_s: float | None = None,
                        error_kind: str | None = None) -> None:
        """Count one request and observe its step times (None: the step did not run here)."""
        label = self.language_label(language)
        self.metrics.requests.labels(label, status).inc()
        if error_kind:
            self.metrics.errors.labels(error_kind).inc()
        for step, seconds in (("compile", compile_s), ("run", run_s), ("total", total_s)):
            if seconds is not None:
                self.metrics.execution_time.labels(label, step).observe(seconds)

    def finish_quietly(self, record: RunRecord, http_status: int, error_body: bytes) -> None:
        """``finish``, but a bug in accounting never costs the client its answer."""
        try:
            self.finish(record, http_status, error_body)
        except Exception:  # noqa: BLE001
            log.exception("could not count or audit request %s", record.request_id)

    def finish(self, record: RunRecord, http_status: int, error_body: bytes) -> None:
        record.finished = True
        total_s = time.perf_counter() - record.started
        status = status_label(http_status, record.verdict)
        ran = record.verdict is not None and http_status == 200
        kind = error_kind(http_status, record.result_error_kind)
        self.observe_request(record.language, status,
                             compile_s=record.compile_s if ran and not record.compile_cached else None,
                             run_s=record.run_s if ran else None,
                             total_s=total_s if ran else None, error_kind=kind)
        if not self.audit.enabled:
            return
        code = record.code
        self.audit.record({
            "time": record.received_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "request_id": record.request_id,
            "client": record.client,
            "method": record.method,
            "path": record.path,
            "http_status": http_status,
            "status": status,
            "language": record.language[:64] if record.language is not None else None,
            "code_sha256": hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()
            if code is not None else None,
            "code_chars": len(code) if code is not None else None,
            "code_head": code[:CODE_HEAD_CHARS] if code is not None else None,
            "limits": record.limits,
            "durations_s": {"engine": _round(record.engine_s), "compile": _round(record.compile_s),
                            "run": _round(record.run_s), "total": _round(total_s)},
            "compile_cached": record.compile_cached,
            "tests": record.tests,
            "sandbox_id": record.sandbox_id,
            "session_id": record.session_id,
            "error_kind": kind,
            "detail": _detail(error_body) if http_status >= 400 else None,
        })


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)


def _detail(body: bytes) -> str | None:
    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return None
    return str(detail)[:300] if detail is not None else None


class RequestContext:
    """ASGI middleware: request id in and out; count and audit the audited endpoints."""

    def __init__(self, app, ops: Observability) -> None:
        self.app = app
        self.ops = ops
        # Which replica answered: for an operator behind a proxy, and for per-node counts.
        self.replica = ops.settings.replica.encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        incoming = next((v.decode("latin-1") for k, v in scope["headers"]
                         if k == b"x-request-id"), None)
        request_id = accept_request_id(incoming)
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        record = None
        if scope["path"] in self.ops.audited_paths:
            client = scope.get("client")
            record = RunRecord(request_id, client[0] if client else None, scope["method"],
                               scope["path"], datetime.now(timezone.utc))
            state["run_record"] = record
        http_status = 500
        started = False
        error_body = bytearray()

        async def send_with_id(message):
            nonlocal http_status, started
            if message["type"] == "http.response.start":
                started = True
                http_status = message["status"]
                headers = [*message.get("headers", ()), (b"x-request-id", request_id.encode())]
                if not any(name == b"x-sandbox-replica" for name, _ in headers):
                    headers.append((b"x-sandbox-replica", self.replica))  # else: re-sent to its owner
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and record is not None \
                    and not record.finished:
                if http_status >= 400 and len(error_body) < _ERROR_BODY_KEEP:
                    error_body.extend(message.get("body", b"")[:_ERROR_BODY_KEEP])
                if not message.get("more_body", False):
                    self.ops.finish_quietly(record, http_status, bytes(error_body))
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            if not started:  # answer here, so the 500 carries the request id; then log it
                body = json.dumps({"detail": "internal server error",
                                   "request_id": request_id}).encode()
                await send_with_id({"type": "http.response.start", "status": 500,
                                    "headers": [(b"content-type", b"application/json"),
                                                (b"content-length", str(len(body)).encode())]})
                await send_with_id({"type": "http.response.body", "body": body})
            raise
        finally:
            if record is not None and not record.finished:  # client gone mid-response
                self.ops.finish_quietly(record, http_status, bytes(error_body))
            if state.get("answered_elsewhere"):
                self.ops.metrics.resent.inc()


def run_record(request: Request) -> RunRecord | None:
    return getattr(request.state, "run_record", None)


def answered_elsewhere(scope) -> None:
    """The request is re-sent to the replica that holds its session, which counts and audits it:
    here it is finished already."""
    state = scope.setdefault("state", {})
    state["answered_elsewhere"] = True
    if state.get("run_record") is not None:
        state["run_record"].finished = True


def note_run_request(request: Request, req) -> None:
    """What a /run_code request asked for (a ``RunCodeRequest``), before it is checked."""
    record = run_record(request)
    if record is None:
        return
    record.language, record.code = req.language, req.code
    record.session_id = getattr(req, "session_id", None)
    record.limits = {"compile_timeout_s": req.compile_timeout, "run_timeout_s": req.run_timeout,
                     "memory_mb": req.memory_limit_MB}


def note_run_result(request: Request, job: Job, result: JobResult, verdict: str,
                    engine_s: float) -> None:
    """What ran: the limits applied, the verdict, step times and the sandbox."""
    record = run_record(request)
    if record is None:
        return
    limits = job.limits
    record.limits = {"compile_timeout_s": limits.compile_timeout_s,
                     "run_timeout_s": limits.run_timeout_s, "memory_mb": limits.memory_mb}
    record.verdict, record.engine_s, record.sandbox_id = verdict, engine_s, result.sandbox_id
    # The same kind the answer's `error_kind` carries.
    record.result_error_kind = result.error_kind or ("backend_error" if verdict == "SandboxError" else None)
    # A step that ended in a sandbox error never ran: its 0 s would skew the histograms.
    if result.compile is not None and result.compile.status is not StepStatus.ERROR:
        record.compile_s, record.compile_cached = result.compile.wall_time_s, result.compile.cached
    if result.run is not None and result.run.status is not StepStatus.ERROR:
        record.run_s = result.run.wall_time_s


def note_sandbox_call(request: Request, language: str, code: str, sandbox_id: str,
                      memory_mb: int) -> None:
    """A call that runs code in a kept sandbox (E2B's cells and commands): what it asked."""
    record = run_record(request)
    if record is None:
        return
    record.language, record.code = language, code
    record.sandbox_id = record.session_id = sandbox_id
    record.limits = {"memory_mb": memory_mb}


def note_sandbox_result(request: Request, verdict: str, run_s: float) -> None:
    """How it ended: Success, Failed (an error, a non-zero exit) or SandboxError."""
    record = run_record(request)
    if record is None:
        return
    record.verdict, record.engine_s, record.run_s = verdict, run_s, run_s
    if verdict == "SandboxError":
        record.result_error_kind = "backend_error"


def note_evaluation_result(request: Request, evaluation, result, status: str,
                           engine_s: float) -> None:
    """The same for /v1/evaluate: run time is the sum of the tests' times, and the audit line
    says how many tests passed."""
    record = run_record(request)
    if record is None:
        return
    limits = evaluation.job.limits
    record.limits = {"compile_timeout_s": limits.compile_timeout_s,
                     "run_timeout_s": limits.run_timeout_s, "memory_mb": limits.memory_mb,
                     "tests": len(evaluation.tests)}
    record.verdict = status
    record.result_error_kind = result.error_kind or ("backend_error" if status == "SandboxError" else None)
    record.tests = {"passed": result.passed, "total": len(result.outcomes)}
    record.engine_s, record.sandbox_id = engine_s, result.sandbox_id
    if result.compile is not None and result.compile.status is not StepStatus.ERROR:
        record.compile_s, record.compile_cached = result.compile.wall_time_s, result.compile.cached
    times = [o.wall_time_s for o in result.outcomes if o.wall_time_s is not None]
    record.run_s = sum(times) if times else None


# On a cluster, the part of /metrics one replica asks of each other one: its own series.
METRICS_PART = "x-sandbox-metrics-part"


class _Families:
    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        return self.families


def _exposition(families: list) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return generate_latest(registry)


def label_exposition(text: bytes, replica: str) -> bytes:
    """Prometheus text with a ``replica`` label on every series."""
    families = list(text_string_to_metric_families(text.decode()))
    for family in families:
        family.samples = [s._replace(labels={**s.labels, "replica": replica})
                          for s in family.samples]
    return _exposition(families)


def merge_expositions(parts: list[bytes]) -> bytes:
    """Several replicas' labelled Prometheus text as one (a family's series together, as the
    format requires). A replica answering twice (standing in for a lost one) counts once."""
    merged: dict[str, object] = {}
    seen: set[str] = set()
    for part in parts:
        families = list(text_string_to_metric_families(part.decode()))
        replicas = {s.labels.get("replica") for f in families for s in f.samples}
        if replicas & seen:
            continue
        seen |= replicas
        for family in families:
            into = merged.setdefault(family.name, family)
            if into is not family:
                into.samples += family.samples
    return _exposition(list(merged.values()))


def install_observability(app: FastAPI, settings: Settings, engine: Engine,
                          languages: Iterable[str], aliases: dict[str, str] | None = None) -> Observability:
    """Add the request-id/audit middleware (call last: it must be the outermost) and /metrics."""
    ops = Observability(settings, engine, languages, aliases)
    app.add_middleware(RequestContext, ops=ops)

    @app.get("/metrics", tags=["Operations"], summary="Prometheus metrics",
             response_class=Response)
    async def metrics(request: Request) -> Response:
        ask_others = request.app.state.services.ask_other_replicas
        if ask_others is None:  # a server of its own: its metrics
            return Response(ops.metrics.exposition(), media_type=METRICS_CONTENT_TYPE)
        # A Ray cluster's one URL reaches any replica: it answers the cluster's, each series
        # labelled with its replica (the same one every scrape, whichever replica answers).
        own = label_exposition(ops.metrics.exposition(), settings.replica)
        if METRICS_PART in request.headers:
            return Response(own, media_type=METRICS_CONTENT_TYPE)
        parts = [own] + [body for status, body in
                         await ask_others("GET", "/metrics", {}, {METRICS_PART: "1"})
                         if status == 200]
        return Response(merge_expositions(parts), media_type=METRICS_CONTENT_TYPE)

    return ops
