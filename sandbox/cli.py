"""sandbox: serve | run FILE | doctor | config | images build [LANG...] | images list |
images export-rootfs DEST [LANG...] | ray deploy | ray stop | ray status (also ``python -m
sandbox``). Settings come from SANDBOX_*
variables and the TOML file named by SANDBOX_CONFIG or --config; `sandbox config --markdown`
lists them."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from .config import ConfigError, Settings, load_settings, unknown_environment_settings


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: ports are 1 to 65535")
    return port


def _host(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty, which would serve on every interface; give "
                                         "an address (127.0.0.1, or 0.0.0.0)")
    return text.strip()


def _parser() -> argparse.ArgumentParser:
    # --config is accepted before or after every command, so `run` and `doctor` see what
    # `serve` would. SUPPRESS: a command's missing --config must not erase one given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", type=Path, default=argparse.SUPPRESS,
                        help="TOML settings file (default: $SANDBOX_CONFIG, else none)")
    parser = argparse.ArgumentParser(prog="sandbox", description=__doc__, parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="run the HTTP server")
    serve.add_argument("--host", type=_host, help="bind address (default SANDBOX_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port (default SANDBOX_PORT or 8080)")

    run = sub.add_parser(
        "run", parents=[common], help="run one program in a sandbox, without a server",
        description="Run FILE once through the same engine, backend and limits the server uses. "
                    "Exit code: 0 on success; the program's own exit code; 128+N if killed by "
                    "signal N; 124 on timeout; 1 if compiling failed; 2 if the run could not be "
                    "asked for; 3 if the sandbox failed.")
    run.add_argument("file", type=Path, help="source file; its extension gives the language")
    run.add_argument("--language", "-l", help="language (default: from the file's extension)")
    run.add_argument("--stdin", metavar="FILE|-", help="feed this file (or - for this stdin)")
    run.add_argument("--timeout", type=float, default=10.0, metavar="S",
                     help="run step limit, seconds (default 10)")
    run.add_argument("--compile-timeout", type=float, default=10.0, metavar="S",
                     help="compile step limit, seconds (default 10)")
    run.add_argument("--memory", type=int, default=-1, metavar="MB",
                     help="memory cap (default: the language's, after config overrides)")
    run.add_argument("--json", action="store_true",
                     help="print the SandboxFusion-shaped response instead of the output")

    sub.add_parser("doctor", parents=[common],
                   help="check that this host can serve, and say how to fix what is missing")

    config = sub.add_parser("config", parents=[common], help="print the effective settings")
    config.add_argument("--markdown", action="store_true",
                        help="print the table of every setting (as in docs/configuration.md) instead")

    images = sub.add_parser("images", parents=[common], help="build or list the language images")
    images_sub = images.add_subparsers(dest="images_command", required=True)
    build = images_sub.add_parser("build", parents=[common], help="build the base and language images")
    build.add_argument("languages", nargs="*",
                       help="only these languages (default: all but the GPU ones, cuda and "
                            "python_gpu, whose image is built only when named)")
    build.add_argument("--jobs", type=int, default=None,
                       help="images built at once (default: 3; Makefile: JOBS=)")
    images_sub.add_parser("list", parents=[common], help="show each language's image and toolchain version")
    export = images_sub.add_parser(
        "export-rootfs", parents=[common], help="unpack the language images into DEST for SANDBOX_ROOTFS_DIR "
                              "(the oci backend without Docker)")
    export.add_argument("dest", type=Path, help="folder to write (one subfolder per image)")
    export.add_argument("languages", nargs="*",
                        help="only these languages (default: all but the GPU ones)")
    export.add_argument("--metadata-only", action="store_true",
                        help="write only each image's image.json (reference, id, environment); "
                             "the server image build copies the roots itself")

    ray = sub.add_parser("ray", parents=[common],
                         help="run the sandbox as a Ray Serve application (pip install '.[ray]')")
    ray_sub = ray.add_subparsers(dest="ray_command", required=True)
    deploy = ray_sub.add_parser(
        "deploy", parents=[common], help="deploy (or update) it on a running Ray cluster",
        description="One replica per node started with --resources '{\"sandbox\": 1}', each "
                    "with this machine's settings (SANDBOX_*, --config) over its node's own; "
                    "every node's Serve proxy serves the API.")
    deploy.add_argument("--address", help="the cluster (default: RAY_ADDRESS, else the local one)")
    deploy.add_argument("--host", help="where each node's proxy listens (default SANDBOX_HOST or "
                                       "127.0.0.1: a trainer uses its own node's proxy)")
    deploy.add_argument("--port", type=_port, default=8000, help="proxy port (default 8000)")
    deploy.add_argument("--min-replicas", type=int, help="default: the sandbox nodes now")
    deploy.add_argument("--max-replicas", type=int, help="default: 4x the sandbox nodes now")
    deploy.add_argument("--target-ongoing-requests", type=float, default=8,
                        help="requests in flight per replica the autoscaler aims at (default 8)")
    stop = ray_sub.add_parser("stop", parents=[common], help="delete the application")
    stop.add_argument("--address", help="the cluster (default: RAY_ADDRESS, else the local one)")
    status = ray_sub.add_parser("status", parents=[common], help="its replicas and their nodes")
    status.add_argument("--address", help="the cluster (default: RAY_ADDRESS, else the local one)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    config_file = getattr(args, "config", None)  # absent when given nowhere (SUPPRESS)
    if args.command == "config" and args.markdown:
        from .config_docs import markdown_table

        print(markdown_table(), end="")  # the model's table: needs no valid environment
        return 0
    try:
        settings = load_settings(config=config_file) if config_file else load_settings()
    except ConfigError as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2
    try:
        return COMMANDS[args.command](args, settings)
    except BrokenPipeError:
        # The reader went away (`sandbox run x.py --json | head`): end as a pipeline's writer
        # does, quietly. Python's own flush at exit would fail again, so stdout goes nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except _setting_errors() as exc:
        # A setting that validates but does not work on this host (runtimes_dir without specs,
        # an audit log that cannot be opened, an OCI runtime that is not there): its message
        # names the setting, a traceback would only hide it.
        print(f"sandbox {args.command}: {exc}", file=sys.stderr)
        return 2


def _setting_errors() -> tuple[type[Exception], ...]:
    from .api.observability import AuditLogUnavailable
    from .engine.backends.select import BackendUnavailable
    from .runtimes import RuntimeSpecError

    return (RuntimeSpecError, AuditLogUnavailable, BackendUnavailable)


# asyncio's own event loop, not uvloop: uvloop's pipe transports close a pipe's descriptor
# twice (libuv, then the file object; MagicStack/uvloop#763), and the second close(2) can hit
# a descriptor another thread has just opened: under load a sandbox's files were written
# through a closed descriptor. Measured here, the two loops serve requests equally fast.
EVENT_LOOP = "asyncio"
# How long an idle client connection is kept: longer than clients keep theirs in a pool
# (httpx 5 s, aiohttp 15 s, HAProxy's server pool 5 s), so that the client always drops an
# idle connection first. uvicorn's own 5 s raced httpx's 5 s: under load a request sent into
# a connection the server was closing got a reset (ReadError), an answer lost to the client.
KEEP_ALIVE_S = 75


def serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from .api import create_app
    from .api.limits import with_read_deadline
    from .engine.backends.host import leave_hybrid_cgroups

    if settings.backend != "docker":
        leave_hybrid_cgroups()  # before any thread starts: unshare() needs a single thread
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("sandbox")
    log.info("settings: %s", f"config file {settings.config}" if settings.config else "no config file")
    for name, close in unknown_environment_settings():
        log.warning("environment variable %s is not a setting and is ignored%s", name,
                    f" (did you mean {close}?)" if close else "")
    from .local_run import oci_folders_problem

    host, port = args.host or settings.host, args.port or settings.port
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # uvicorn would only say "Name or service not known"
        print(f"sandbox serve: cannot serve on host {host!r} (SANDBOX_HOST or --host): "
              f"{getattr(exc, 'strerror', None) or exc}; give an address of this machine "
              f"(127.0.0.1, or 0.0.0.0 for every interface)", file=sys.stderr)
        return 2
    app = create_app(settings)
    # Checked here: failing in the server's start-up would be a traceback from its lifespan.
    problem = oci_folders_problem(settings, app.state.services.engine.backend)
    if problem:
        print(f"sandbox serve: {problem}", file=sys.stderr)
        return 2
    uvicorn.run(app, host=host, port=port, log_level="info", loop=EVENT_LOOP,
                http=with_read_deadline(settings.request_read_timeout_s),
                timeout_keep_alive=KEEP_ALIVE_S,
                access_log=False)  # a log line per request costs more than the request's HTTP
    return 0


def run(args: argparse.Namespace, settings: Settings) -> int:
    from .engine.backends.host import leave_hybrid_cgroups
    from .local_run import EXIT_USAGE, RunUsageError, exit_code_for, print_human, run_file

    if args.stdin == "-":
        stdin = sys.stdin.buffer.read()
    elif args.stdin:
        try:
            stdin = Path(args.stdin).read_bytes()
        except OSError as exc:
            print(f"sandbox run: cannot read --stdin {args.stdin}: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
    else:
        stdin = b""
    if settings.backend != "docker":
        leave_hybrid_cgroups()  # as serve does: crun then runs directly
    logging.basicConfig(level=logging.WARNING, format="sandbox run: %(message)s")
    try:
        response, backend, language = asyncio.run(run_file(
            args.file, settings, language=args.language, stdin=stdin, timeout_s=args.timeout,
            compile_timeout_s=args.compile_timeout, memory_mb=args.memory))
    except RunUsageError as exc:
        print(f"sandbox run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # the run was cancelled, its sandbox removed
        print("sandbox run: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    if args.json:
        print(response.model_dump_json(indent=1))
    else:
        print_human(response, backend, language)
    return exit_code_for(response)


def doctor(args: argparse.Namespace, settings: Settings) -> int:
    from .doctor import doctor as run_doctor

    return run_doctor(settings)


def config(args: argparse.Namespace, settings: Settings) -> int:
    from .config_docs import effective_toml

    print(effective_toml(settings), end="")
    return 0


def images(args: argparse.Namespace, settings: Settings) -> int:
    from .images import build_images, export_roots, list_images

    if args.images_command == "build":
        return build_images(args.languages or None, settings,
                            **({"jobs": args.jobs} if args.jobs else {}))
    if args.images_command == "export-rootfs":
        return export_roots(args.dest, args.languages or None, settings, args.metadata_only)
    return list_images(settings)


def ray(args: argparse.Namespace, settings: Settings) -> int:
    address = args.address or os.environ.get("RAY_ADDRESS", "")
    _keep_loopback_ray_address(address)
    try:
        import sandbox.ray as sandbox_ray
    except ImportError as exc:
        print(f"sandbox ray: Ray Serve is not installed ({exc}); pip install '.[ray]'",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import ray as ray_core

    def no_cluster(why: object) -> int:
        print(f"sandbox ray: no Ray cluster at {args.address or 'RAY_ADDRESS or this machine'} "
              f"({why}); start one (`ray start --head`) or pass --address HEAD:6379",
              file=sys.stderr)
        return 1

    unreachable = _unreachable_ray_address(address)
    if unreachable:
        # ray.init retries an address nobody listens at for minutes, deaf to Ctrl-C.
        return no_cluster(unreachable)
    try:
        ray_core.init(address=args.address or "auto", log_to_driver=False)
    except ConnectionError as exc:
        return no_cluster(exc)
    if args.ray_command == "stop":
        print("sandbox ray: application deleted" if sandbox_ray.stop() else
              f"sandbox ray: the {sandbox_ray.APP!r} application is not deployed here: "
              f"nothing to delete")
        return 0
    if args.ray_command == "status":
        try:
            running = sandbox_ray.replicas()
        except sandbox_ray.DeployError as exc:
            print(f"sandbox ray: {exc}", file=sys.stderr)
            return 1
        for name, node in sorted(running.items()):
            print(f"replica {name} on node {node}")
        if not running:
            print("sandbox ray: deployed, but no replica is running (starting, or waiting for "
                  "a node with the 'sandbox' resource)")
        return 0
    # The settings given here (file and environment), as the replicas' own: only those set.
    given = settings.model_dump(exclude_unset=True, exclude={"config", "replica", "instance"})
    try:
        url = sandbox_ray.deploy(settings=given, host=args.host or settings.host, port=args.port,
                                 min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                                 target_ongoing_requests=args.target_ongoing_requests)
    except sandbox_ray.DeployError as exc:
        print(f"sandbox ray: {exc}", file=sys.stderr)
        return 1
    print(f"sandbox ray: serving on every node's port {args.port} ({url} here); replicas: "
          f"{', '.join(sorted(sandbox_ray.replicas()))}")
    return 0


def _ray_host_port(address: str) -> tuple[str, str]:
    """HOST and PORT of a HOST:PORT (or ray://HOST:PORT) address as written; ("", "") for
    anything else (auto, local, empty)."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    return (host, port) if sep and host and port.isdigit() else ("", "")


def _keep_loopback_ray_address(address: str) -> None:
    """A cluster on one machine runs its nodes at 127.0.0.1 (``node_ip_address``), and Ray
    rewrites a loopback address to this machine's routed one before connecting: where such a
    cluster does not listen, ray.init retried there for minutes. Ray's own switch keeps
    loopback addresses loopback; set (before Ray is imported) only when nothing answers at the
    routed address, since a cluster started there needs the rewrite."""
    host, port = _ray_host_port(address)
    host = host.strip("[]")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not port or not loopback:
        return
    try:  # the address Ray picks: the source of a route to the internet (no packet is sent)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("8.8.8.8", 80))
            routed = probe.getsockname()[0]
    except OSError:
        return  # no route: Ray stays on loopback itself
    if not ipaddress.ip_address(routed).is_loopback and _unreachable_ray_address(
            f"{routed}:{port}", timeout_s=1.0):
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def _unreachable_ray_address(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at a HOST:PORT (or ray://HOST:PORT) address, or None (answered,
    or not an address of that form: auto, local, empty)."""
    host, port = _ray_host_port(address)
    if not port:
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        return f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    return None


COMMANDS = {"serve": serve, "run": run, "doctor": doctor, "config": config, "images": images,
            "ray": ray}

if __name__ == "__main__":
    sys.exit(main())
