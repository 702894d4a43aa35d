"""``sandbox serve | images build [LANG...] | images list | images export-rootfs DEST [LANG...]``
(also ``python -m sandbox``)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .config import get_settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sandbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", help="bind address (default SANDBOX_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default SANDBOX_PORT or 8080)")
    images = sub.add_parser("images", help="build or list the language images")
    images_sub = images.add_subparsers(dest="images_command", required=True)
    build = images_sub.add_parser("build", help="build the base and language images")
    build.add_argument("languages", nargs="*", help="only these languages (default: all)")
    images_sub.add_parser("list", help="show each language's image and toolchain version")
    export = images_sub.add_parser(
        "export-rootfs", help="unpack the language images into DEST for SANDBOX_ROOTFS_DIR "
                              "(the oci backend without Docker)")
    export.add_argument("dest", type=Path, help="folder to write (one subfolder per image)")
    export.add_argument("languages", nargs="*", help="only these languages (default: all)")
    export.add_argument("--metadata-only", action="store_true",
                        help="write only each image's image.json (reference, id, environment); "
                             "the server image build copies the roots itself")
    args = parser.parse_args(argv)
    settings = get_settings()

    if args.command == "serve":
        import uvicorn

        from .api import create_app
        from .engine.backends.oci import leave_hybrid_cgroups

        if settings.backend != "docker":
            leave_hybrid_cgroups()  # before any thread starts: unshare() needs a single thread
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        uvicorn.run(create_app(settings), host=args.host or settings.host,
                    port=args.port or settings.port, log_level="info",
                    access_log=False)  # a log line per request costs more than the request's HTTP
        return 0
    from .images import build_images, export_roots, list_images

    if args.images_command == "build":
        return build_images(args.languages or None, settings)
    if args.images_command == "export-rootfs":
        return export_roots(args.dest, args.languages or None, settings, args.metadata_only)
    return list_images(settings)


if __name__ == "__main__":
    sys.exit(main())
