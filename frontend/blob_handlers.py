"""The operations of the Azure Blob REST subset (DESIGN §6), one handler each, chosen by
`route` from the method, the URL's depth and the query — `comp` before `x-ms-blob-type`.

Account: List Containers, Get Account Information. Container: Create, Delete, Get
Properties / Metadata, Set Metadata, List Blobs (prefix, maxresults, marker). Append blob:
Put Blob (AppendBlob, empty), Append Block (appendpos, maxsize, Content-MD5 or
x-ms-content-crc64), Get Blob (whole, or a range: 206 with Content-Range, 416 past the end),
Get Blob Properties (HEAD), Get / Set Metadata, Set Properties, Seal, Delete.

What is stored or echoed in XML is checked first: metadata as Azure's rule says
(blob_model.check_metadata), blob names and List parameters free of characters XML cannot
carry (400), content headers free of bytes that were not UTF-8. Bodies move in time both
ways (blob_request.transfer_timeout_s): an Append Block's is read in time or the request is
408, and Get Blob's every write is taken in time or the connection is cut.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable
from dataclasses import replace
from email.utils import parsedate_to_datetime

from aiohttp import web

from common.errors import InvalidArgument
from frontend import blob_model as model
from frontend import blob_xml
from frontend.blob_model import BlobError, Conditions, Props, http_date, http_etag
from frontend.blob_request import (
    REQUEST_OVERHEAD_BYTES,
    BlobRequest,
    Handler,
    admit,
    transfer_timeout_s,
    write_within,
)
from frontend.blob_store import BlobStore
from frontend.names import check_name, shown_name
from frontend.server_call import FrontEnd

META_PREFIX = "x-ms-meta-"
# Content headers of Put Blob / Set Blob Properties, and the response header each becomes.
CONTENT_HEADERS = {"x-ms-blob-content-type": "Content-Type",
                   "x-ms-blob-content-encoding": "Content-Encoding",
                   "x-ms-blob-content-language": "Content-Language",
                   "x-ms-blob-content-md5": "Content-MD5",
                   "x-ms-blob-cache-control": "Cache-Control",
                   "x-ms-blob-content-disposition": "Content-Disposition"}
RANGE_MD5_BYTES_MAX = 4 * 1024 * 1024  # x-ms-range-get-content-md5: the service's limit


def _bad_header(name: str, why: str) -> BlobError:
    return BlobError(400, "InvalidHeaderValue",
                     f"The value for one of the HTTP headers is not in the correct format: "
                     f"{name}: {why}", {"x-ms-invalid-header-name": name})


def _unsupported(request: BlobRequest) -> BlobError:
    return BlobError(400, "UnsupportedHttpVerb" if request.comp == "" else
                     "InvalidQueryParameterValue",
                     f"{request.http.method} with comp={shown_name(request.comp)!r} "
                     f"restype={shown_name(request.restype)!r} is not an operation of this "
                     f"endpoint.")


def route(request: BlobRequest) -> Handler:
    method, comp = request.http.method, request.comp
    table: dict[tuple[str, str], Handler]
    if not request.container:
        table = {("GET", "list"): list_containers, ("GET", "properties"): account_info,
                 ("HEAD", "properties"): account_info}
    elif not request.blob:
        if request.restype != "container":
            raise _unsupported(request)
        table = {("PUT", ""): create_container, ("DELETE", ""): delete_container,
                 ("GET", ""): container_properties, ("HEAD", ""): container_properties,
                 ("GET", "metadata"): container_properties,
                 ("HEAD", "metadata"): container_properties,
                 ("PUT", "metadata"): set_container_metadata, ("GET", "list"): list_blobs}
    else:
        table = {("PUT", "appendblock"): append_block, ("PUT", "seal"): seal,
                 ("PUT", "metadata"): set_metadata, ("PUT", "properties"): set_properties,
                 ("PUT", ""): put_blob, ("GET", ""): get_blob, ("HEAD", ""): blob_properties,
                 ("GET", "metadata"): get_metadata, ("HEAD", "metadata"): get_metadata,
                 ("DELETE", ""): delete_blob}
    handler = table.get((method, comp))
    if handler is None:
        raise _unsupported(request)
    if request.header("x-ms-lease-id") is not None and request.container:
        # No leases here (comp=lease is refused): a request that names one names none held.
        kind = "Blob" if request.blob else "Container"
        raise BlobError(412, f"LeaseNotPresentWith{kind}Operation",
                        f"There is currently no lease on the {kind.lower()}.")
    return handler


# ---- request parts ---------------------------------------------------------------------------

def conditions(request: BlobRequest) -> Conditions:
    return Conditions(if_match=request.header("If-Match"),
                      if_none_match=request.header("If-None-Match"),
                      appendpos=_number(request, "x-ms-blob-condition-appendpos"),
                      maxsize=_number(request, "x-ms-blob-condition-maxsize"),
                      if_modified_since_s=_date(request, "If-Modified-Since"),
                      if_unmodified_since_s=_date(request, "If-Unmodified-Since"))


def _date(request: BlobRequest, name: str) -> int | None:
    """An HTTP date header in whole seconds since the epoch (None: absent or not a date,
    which the service ignores as HTTP says)."""
    text = request.header(name)
    if text is None:
        return None
    try:
        return int(parsedate_to_datetime(text).timestamp())
    except (TypeError, ValueError):
        return None


def _number(request: BlobRequest, name: str) -> int | None:
    text = request.header(name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise _bad_header(name, f"{shown_name(text)!r} is not a whole number") from None
    if value < 0:
        raise _bad_header(name, "negative")
    return value


def metadata_of(request: BlobRequest) -> dict[str, str]:
    """The request's x-ms-meta-* headers (400 unless Azure's metadata rules hold)."""
    return model.check_metadata({
        name[len(META_PREFIX):]: value for name, value in request.http.headers.items()
        if name.lower().startswith(META_PREFIX)})


def content_of(request: BlobRequest) -> dict[str, str]:
    """The content headers a Put Blob or Set Blob Properties sets, by response header."""
    content = {}
    for name, target in CONTENT_HEADERS.items():
        value = request.header(name)
        if value:
            if model.XML_UNSAFE.search(value.replace("\t", " ")):
                raise _bad_header(name, "control characters or bytes that are not UTF-8")
            content[target] = value
    return content


def _answer(request: BlobRequest, status: int, headers: dict[str, str] | None = None,
            body: bytes | None = None, content_type: str | None = None) -> web.Response:
    all_headers = {**request.base_headers(), **(headers or {})}
    return web.Response(status=status, headers=all_headers, body=body,
                        content_type=content_type)


def _blob_headers(props: Props, etag: str) -> dict[str, str]:
    headers = {"ETag": http_etag(etag), "Last-Modified": http_date(props.modified_ms),
               "x-ms-creation-time": http_date(props.created_ms),
               "x-ms-blob-type": model.BLOB_TYPE,
               "x-ms-blob-committed-block-count": str(props.appends),
               "x-ms-blob-sealed": "true" if props.sealed else "false",
               "x-ms-lease-state": "available", "x-ms-lease-status": "unlocked",
               "x-ms-server-encrypted": "false", "Accept-Ranges": "bytes",
               "Content-Type": "application/octet-stream"}
    headers.update(props.content)
    headers.update({META_PREFIX + k: v for k, v in props.metadata.items()})
    return headers


def _list_params(request: BlobRequest, store: BlobStore) -> tuple[str, str, int | None]:
    text = request.query.get("maxresults")
    max_results = None
    if text is not None:
        try:
            max_results = int(text)
        except ValueError:
            max_results = 0
        if not 1 <= max_results <= store.limits.blob_list_results_max:
            raise BlobError(400, "OutOfRangeQueryParameterValue",
                            f"maxresults is 1 to {store.limits.blob_list_results_max}.")
    return _echoed(request, "prefix"), _echoed(request, "marker"), max_results


def _echoed(request: BlobRequest, name: str) -> str:
    """A query parameter a listing writes back in its XML."""
    value = request.query.get(name, "")
    if model.XML_UNSAFE.search(value):
        raise BlobError(400, "InvalidQueryParameterValue",
                        f"The query parameter {name} holds control characters.",
                        {"x-ms-invalid-query-parameter-name": name})
    return value


# ---- the account and containers --------------------------------------------------------------

async def account_info(request: BlobRequest, store: BlobStore, fe: FrontEnd
                       ) -> web.StreamResponse:
    return _answer(request, 200, {"x-ms-sku-name": "Standard_RAGRS",
                                  "x-ms-account-kind": "StorageV2",
                                  "x-ms-is-hns-enabled": "false"})


async def list_containers(request: BlobRequest, store: BlobStore, fe: FrontEnd
                          ) -> web.StreamResponse:
    prefix, marker, max_results = _list_params(request, store)
    found, next_marker = await store.list_containers(
        request.account, prefix, marker, max_results or store.limits.blob_list_results_max)
    body = blob_xml.containers(request.endpoint(), prefix, marker, max_results, found,
                               next_marker, "metadata" in request.query.get("include", ""))
    return _answer(request, 200, body=body, content_type="application/xml")


async def create_container(request: BlobRequest, store: BlobStore, fe: FrontEnd
                           ) -> web.StreamResponse:
    try:
        check_name("container", request.container)
    except InvalidArgument as exc:
        raise BlobError(400, "InvalidResourceName", str(exc)) from None
    container, etag = await store.create_container(request.account, request.container,
                                                   metadata_of(request))
    return _answer(request, 201, {"ETag": http_etag(etag),
                                  "Last-Modified": http_date(container.created_ms)})


async def delete_container(request: BlobRequest, store: BlobStore, fe: FrontEnd
                           ) -> web.StreamResponse:
    await store.delete_container(request.account, request.container, conditions(request))
    return _answer(request, 202)


async def container_properties(request: BlobRequest, store: BlobStore, fe: FrontEnd
                               ) -> web.StreamResponse:
    container, etag = await store.container_props(request.account, request.container)
    headers = {"ETag": http_etag(etag), "Last-Modified": http_date(container.created_ms),
               "x-ms-lease-state": "available", "x-ms-lease-status": "unlocked",
               "x-ms-has-immutability-policy": "false", "x-ms-has-legal-hold": "false"}
    headers.update({META_PREFIX + k: v for k, v in container.metadata.items()})
    return _answer(request, 200, headers)


async def set_container_metadata(request: BlobRequest, store: BlobStore, fe: FrontEnd
                                 ) -> web.StreamResponse:
    container, etag = await store.set_container_metadata(request.account, request.container,
                                                         metadata_of(request))
    return _answer(request, 200, {"ETag": http_etag(etag),
                                  "Last-Modified": http_date(container.created_ms)})


async def list_blobs(request: BlobRequest, store: BlobStore, fe: FrontEnd
                     ) -> web.StreamResponse:
    prefix, marker, max_results = _list_params(request, store)
    delimiter = _echoed(request, "delimiter")
    found, next_marker = await store.list_blobs(
        request.account, request.container, prefix, marker,
        max_results or store.limits.blob_list_results_max, delimiter)
    body = blob_xml.blobs(request.endpoint(), request.container, prefix, marker, max_results,
                          delimiter, found, next_marker,
                          "metadata" in request.query.get("include", ""))
    return _answer(request, 200, body=body, content_type="application/xml")


# ---- append blobs --------------------------------------------------------------------------

async def put_blob(request: BlobRequest, store: BlobStore, fe: FrontEnd
                   ) -> web.StreamResponse:
    model.check_blob_name(request.blob)
    blob_type = request.header("x-ms-blob-type")
    if blob_type != model.BLOB_TYPE:
        raise _bad_header("x-ms-blob-type", f"{shown_name(blob_type or '')!r}: this endpoint "
                          f"keeps append blobs (AppendBlob) only")
    if request.header("Content-Length") not in (None, "0"):
        raise _bad_header("Content-Length", "Put Blob of an append blob is empty (0)")
    content = content_of(request)
    props, etag = await store.create_blob(request.account, request.container, request.blob,
                                          content, metadata_of(request), conditions(request))
    return _answer(request, 201, {"ETag": http_etag(etag),
                                  "Last-Modified": http_date(props.modified_ms),
                                  "x-ms-request-server-encrypted": "false"})


async def append_block(request: BlobRequest, store: BlobStore, fe: FrontEnd
                       ) -> web.StreamResponse:
    length = _number(request, "Content-Length")
    if not length:
        raise _bad_header("Content-Length", "an Append Block carries 1 byte or more")
    if length > store.limits.blob_append_bytes_max:
        raise BlobError(413, "RequestBodyTooLarge",
                        f"The request body is too large and exceeds the maximum permissible "
                        f"limit ({store.limits.blob_append_bytes_max} bytes).")
    md5, crc64 = request.header("Content-MD5"), request.header("x-ms-content-crc64")
    if md5 is not None and crc64 is not None:
        raise _bad_header("x-ms-content-crc64", "Content-MD5 and x-ms-content-crc64 "
                          "exclude each other")
    conds = conditions(request)
    container = await store.container(request.account, request.container)
    admit(fe, request, model.container_group(request.container, container.gen),
          length + REQUEST_OVERHEAD_BYTES)
    block = await _body(request, store, length)
    if len(block) != length:
        raise _bad_header("Content-Length", f"{length}, but the body has {len(block)} bytes")
    headers = {}
    if md5 is not None:
        computed = base64.b64encode(hashlib.md5(block, usedforsecurity=False).digest())
        if computed.decode() != md5:
            raise BlobError(400, "Md5Mismatch", "The MD5 value specified in the request did "
                            "not match with the MD5 value calculated by the server.")
        headers["Content-MD5"] = md5
    if crc64 is not None:
        from azure.storage.extensions import checksums  # the service's CRC64, in C

        computed_crc = checksums.crc64.compute(block, 0).to_bytes(8, "little")
        if base64.b64encode(computed_crc).decode() != crc64:
            raise BlobError(400, "Crc64Mismatch", "The CRC64 value specified in the request "
                            "did not match with the CRC64 value calculated by the server.")
        headers["x-ms-content-crc64"] = crc64
    offset, props, etag = await store.append(request.account, request.container,
                                             request.blob, block, conds)
    headers.update({"ETag": http_etag(etag), "Last-Modified": http_date(props.modified_ms),
                    "x-ms-blob-append-offset": str(offset),
                    "x-ms-blob-committed-block-count": str(props.appends),
                    "x-ms-request-server-encrypted": "false"})
    return _answer(request, 201, headers)


async def _body(request: BlobRequest, store: BlobStore, length: int) -> bytes:
    """The request's body of `length` bytes, read in time (the module's rule) or 408."""
    timeout_s = transfer_timeout_s(store.limits, length)
    try:
        async with asyncio.timeout(timeout_s):
            return await request.http.read()
    except TimeoutError:
        raise BlobError(408, "RequestTimeout", f"The body of {length} bytes did not arrive "
                        f"within {timeout_s:.0f} s.", {"Connection": "close"}) from None


async def _change(request: BlobRequest, store: BlobStore, change: Callable[[Props], Props],
                  status: int = 200) -> web.Response:
    props, etag = await store.update(request.account, request.container, request.blob,
                                     conditions(request), change)
    return _answer(request, status, {"ETag": http_etag(etag),
                                     "Last-Modified": http_date(props.modified_ms),
                                     "x-ms-blob-sealed": "true" if props.sealed else "false"})


async def seal(request: BlobRequest, store: BlobStore, fe: FrontEnd) -> web.StreamResponse:
    return await _change(request, store, lambda p: replace(p, sealed=True))


async def set_metadata(request: BlobRequest, store: BlobStore, fe: FrontEnd
                       ) -> web.StreamResponse:
    metadata = metadata_of(request)
    return await _change(request, store, lambda p: replace(p, metadata=metadata))


async def set_properties(request: BlobRequest, store: BlobStore, fe: FrontEnd
                         ) -> web.StreamResponse:
    content = content_of(request)
    return await _change(request, store, lambda p: replace(p, content=content))


async def delete_blob(request: BlobRequest, store: BlobStore, fe: FrontEnd
                      ) -> web.StreamResponse:
    await store.delete_blob(request.account, request.container, request.blob,
                            conditions(request))
    return _answer(request, 202)


async def blob_properties(request: BlobRequest, store: BlobStore, fe: FrontEnd
                          ) -> web.StreamResponse:
    _group, props, etag = await store.read_props(request.account, request.container,
                                                 request.blob)
    model.check_etag_conditions(conditions(request), etag, read=True,
                                modified_ms=props.modified_ms)
    headers = _blob_headers(props, etag)
    headers["Content-Length"] = str(props.length)
    return web.Response(status=200, headers={**request.base_headers(), **headers})


async def get_metadata(request: BlobRequest, store: BlobStore, fe: FrontEnd
                       ) -> web.StreamResponse:
    _group, props, etag = await store.read_props(request.account, request.container,
                                                 request.blob)
    model.check_etag_conditions(conditions(request), etag, read=True,
                                modified_ms=props.modified_ms)
    headers = {"ETag": http_etag(etag), "Last-Modified": http_date(props.modified_ms)}
    headers.update({META_PREFIX + k: v for k, v in props.metadata.items()})
    return _answer(request, 200, headers)


async def get_blob(request: BlobRequest, store: BlobStore, fe: FrontEnd
                   ) -> web.StreamResponse:
    group, props, etag = await store.read_props(request.account, request.container,
                                                request.blob)
    model.check_etag_conditions(conditions(request), etag, read=True,
                                modified_ms=props.modified_ms)
    wanted = model.parse_range(request.header("x-ms-range") or request.header("Range"),
                               props.length)
    start, end = wanted if wanted is not None else (0, props.length)
    headers = {**request.base_headers(), **_blob_headers(props, etag),
               "Content-Length": str(end - start)}
    if wanted is not None:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{props.length}"
    admit(fe, request, group, end - start + REQUEST_OVERHEAD_BYTES)
    pieces = store.read(request.account, group, request.blob, props.gen, start, end)
    if request.header("x-ms-range-get-content-md5") == "true":
        if wanted is None or end - start > RANGE_MD5_BYTES_MAX:
            raise BlobError(400, "OutOfRangeInput", "x-ms-range-get-content-md5 needs a "
                            f"range of at most {RANGE_MD5_BYTES_MAX} bytes.")
        data = b"".join([piece async for piece in pieces])
        headers["Content-MD5"] = base64.b64encode(
            hashlib.md5(data, usedforsecurity=False).digest()).decode()
        return web.Response(status=206, headers=headers, body=data)
    first = await anext(pieces, b"")  # a read that fails at once is still an error answer
    response = web.StreamResponse(status=206 if wanted is not None else 200,
                                  headers=headers)
    await response.prepare(request.http)
    if first:
        await write_within(request.http, response, first, store.limits)
    async for piece in pieces:
        await write_within(request.http, response, piece, store.limits)
    await write_within(request.http, response, b"", store.limits)
    return response
