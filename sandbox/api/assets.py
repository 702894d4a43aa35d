"""The HTTP side of assets: PUT /v1/assets stores a file once, GET tells whether it is here.

The store itself is ``sandbox/assets.py``; requests name its assets in `files` and
``translate`` resolves them. A PUT enforces its own size limit while it reads the body
(SANDBOX_MAX_ASSET_BYTES, not SANDBOX_MAX_BODY_BYTES: ``BodySizeLimit`` leaves this path alone).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..assets import (AssetNotFound, AssetStore, AssetTooLarge, BadAssetHash, EmptyAsset,
                      StoreUnavailable, UploadsOff)
from .schemas import AssetInfoResponse, AssetListing

ASSETS_PATH = "/v1/assets"
# Boundaries and part headers of a multipart body, on top of the file itself.
MULTIPART_SLACK_BYTES = 64 << 10


class MalformedMultipart(ValueError):
    pass


class _BodyTooLarge(Exception):
    pass


def file_from_multipart(body: bytes, content_type: str) -> bytes:
    """The one file of a multipart/form-data ``body`` (the part with a filename, or the only
    part). Python's own parsers are no help here: ``email`` rewrites line ends, and FastAPI's
    needs the python-multipart package, which this server does without."""
    boundary = None
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.lower() == "boundary":
            boundary = value.strip().strip('"')
    if not boundary:
        raise MalformedMultipart("multipart/form-data without a boundary")
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    pieces = (b"\r\n" + body).split(delimiter)
    parts: list[tuple[bool, bytes]] = []
    closed = False
    for piece in pieces[1:]:  # pieces[0]: the preamble
        if piece.startswith(b"--"):
            closed = True
            break
        head, separator, content = piece.partition(b"\r\n\r\n")
        if not head.startswith(b"\r\n") or not separator:
            raise MalformedMultipart("a part of the multipart body has no headers")
        disposition = next((line for line in head.decode("latin-1").split("\r\n")
                            if line.lower().startswith("content-disposition:")), "")
        parts.append(("filename" in disposition.lower(), content))
    if not closed:
        raise MalformedMultipart("the multipart body does not end with its closing boundary")
    files = [content for has_name, content in parts if has_name]
    if len(files) == 1:
        return files[0]
    if not files and len(parts) == 1:
        return parts[0][1]
    raise MalformedMultipart(f"send exactly one file field (this body has {len(files)} file "
                             f"parts among {len(parts)})")


async def _body(request: Request, cap: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise _BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > cap:  # a chunked body with no (or a false) Content-Length
            raise _BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": detail})


def asset_router(store: AssetStore) -> APIRouter:
    router = APIRouter(tags=["Assets"])

    @router.put(ASSETS_PATH, response_model=AssetInfoResponse,
                summary="Store a file once; name it as {\"sha256\": ...} in `files` afterwards",
                openapi_extra={"requestBody": {"required": True, "content": {
                    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
                    "multipart/form-data": {"schema": {
                        "type": "object", "properties": {"file": {"type": "string", "format": "binary"}},
                        "required": ["file"]}}}}},
                responses={403: {"description": "Uploads are turned off (SANDBOX_ASSETS_STORE_MB=0)."},
                           413: {"description": "Larger than SANDBOX_MAX_ASSET_BYTES."},
                           422: {"description": "Empty body, or a multipart body without one file."},
                           507: {"description": "The asset directory cannot be written (disk full)."}})
    async def put_asset(request: Request):
        content_type = request.headers.get("content-type", "")
        multipart = content_type.lower().startswith("multipart/form-data")
        cap = store.max_asset_bytes + (MULTIPART_SLACK_BYTES if multipart else 0)
        try:
            body = await _body(request, cap)
        except _BodyTooLarge:
            return _error(413, store.too_large_message())
        if multipart:
            try:
                body = file_from_multipart(body, content_type)
            except MalformedMultipart as exc:
                return _error(422, f"{exc}; or send the file's bytes as the whole body")
        try:
            # Hashing and writing megabytes would stall every other request on the event loop.
            info = await asyncio.to_thread(store.put, body)
        except EmptyAsset as exc:
            return _error(422, str(exc))
        except AssetTooLarge as exc:
            return _error(413, str(exc))
        except UploadsOff as exc:
            return _error(403, str(exc))
        except StoreUnavailable as exc:
            return _error(507, str(exc))
        return AssetInfoResponse(sha256=info.sha256, size=info.size)

    @router.get(ASSETS_PATH + "/{sha256}", response_model=AssetInfoResponse,
                summary="Whether this server holds the asset (uploaded or in its asset folder)",
                responses={404: {"description": "Not here: PUT it to /v1/assets."},
                           422: {"description": "Not a SHA-256 (64 hex digits)."}})
    async def get_asset(sha256: str):
        try:
            info = store.info(sha256)
        except BadAssetHash as exc:
            return _error(422, str(exc))
        except AssetNotFound as exc:
            return _error(404, str(exc))
        return AssetInfoResponse(sha256=info.sha256, size=info.size)

    @router.get(ASSETS_PATH, response_model=AssetListing,
                summary="The asset folder's files by name; the upload store's size")
    async def list_assets() -> AssetListing:
        return AssetListing(
            folder={name: AssetInfoResponse(sha256=i.sha256, size=i.size)
                    for name, i in store.folder_listing().items()},
            uploaded={"entries": store.entries, "bytes": store.bytes,
                      "max_bytes": store.max_total_bytes, "max_asset_bytes": store.max_asset_bytes})

    return router
