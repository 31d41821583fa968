"""The shared-access permission table, every method x every permission (issue 29, part C).

The expected tables are written out here, apart from the code's (wire.PERMISSION_OF,
blob_server's SAS reads), and each cell is checked through the real entry point: a request of
that method, carrying a token that grants that one permission, through `wire.authenticate`
(gRPC) or `blob_server.authorize` (the Azure Blob endpoint). A cell passes if the request is
admitted exactly when the table says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from common.errors import PermissionDenied
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend import blob_auth, blob_request, blob_server, sas, wire
from frontend.accounts import STAND_ALONE
from frontend.auth import Held
from frontend.blob_model import BlobError
from partition_layer.payload_crc import payload_crcs

ACCOUNT = "acme"
KEYS = (b"1" * 32, b"2" * 32)
NOW_S = time.time()

# gRPC: the permission each method needs (DESIGN §5: reads, appends, trims, seals, entity
# writes, scans and listings are separate grants).
EXPECTED_GRPC: dict[str, str] = {
    "Append": "append", "Read": "read", "Peek": "read", "Get": "read", "Subscribe": "read",
    "Trim": "trim", "Seal": "seal", "Put": "write", "Delete": "write", "Batch": "write",
    "Scan": "scan", "ListLogs": "scan", "ScanRanges": "scan",
}


CLAIMS: dict[str, Callable[[], pb.Request | pb.SubscribeRequest | fe_pb.ScanRequest
                           | fe_pb.ScanRangesRequest]] = {
    "Append": lambda: pb.Request(account=ACCOUNT, pname="logs-1", append=pb.AppendOp(
        records=[b"r"], crcs=payload_crcs([b"r"]), token="t")),
    "Read": lambda: pb.Request(account=ACCOUNT, pname="logs-1", read=pb.ReadOp(limit=1)),
    "Peek": lambda: pb.Request(account=ACCOUNT, pname="logs-1", peek=pb.Empty()),
    "Trim": lambda: pb.Request(account=ACCOUNT, pname="logs-1", trim=pb.TrimOp(upto_seq=1)),
    "Seal": lambda: pb.Request(account=ACCOUNT, pname="logs-1", seal=pb.Empty()),
    "Put": lambda: pb.Request(account=ACCOUNT, pname="logs-1", put=pb.PutOp(
        row=b"r", value=b"v")),
    "Get": lambda: pb.Request(account=ACCOUNT, pname="logs-1", get=pb.GetOp(row=b"r")),
    "Delete": lambda: pb.Request(account=ACCOUNT, pname="logs-1", delete=pb.DeleteOp(
        row=b"r")),
    "Batch": lambda: pb.Request(account=ACCOUNT, pname="logs-1", batch=pb.BatchOp()),
    "Subscribe": lambda: pb.SubscribeRequest(account=ACCOUNT, pname="logs-1"),
    "Scan": lambda: fe_pb.ScanRequest(account=ACCOUNT),
    "ListLogs": lambda: fe_pb.ScanRequest(account=ACCOUNT, mode=pb.SCAN_LOG_NAMES),
    "ScanRanges": lambda: fe_pb.ScanRangesRequest(account=ACCOUNT),
}


def _claim(method: str, token: str) -> wire.Claim:
    request = CLAIMS[method]()
    credentials = wire.Credentials(ACCOUNT, sas=token)
    if isinstance(request, pb.Request):
        wire.sign_call(request, credentials, NOW_S)
        return wire.call_claim(request)
    if isinstance(request, pb.SubscribeRequest):
        wire.sign_subscribe(request, credentials, NOW_S)
        return wire.subscribe_claim(request)
    if isinstance(request, fe_pb.ScanRequest):
        wire.sign_scan(request, credentials, NOW_S)
        return wire.scan_claim(request)
    wire.sign_scan_ranges(request, credentials, NOW_S)
    return wire.scan_ranges_claim(request)


def test_the_tables_name_every_method() -> None:
    assert set(EXPECTED_GRPC) == set(wire.PERMISSION_OF) == set(CLAIMS)
    ops = {f.name for f in pb.Request.DESCRIPTOR.oneofs_by_name["op"].fields}
    # A Call scan is refused (the Scan RPC does it); replicate is internal, never a
    # caller's (inter-stamp replication, issue 30: the public protocol has no such op), and
    # so is sync (a front end's wait for a write answered early, CURP, issue 32).
    assert ops - set(wire.METHODS) == {"replicate", "scan", "sync"}
    assert set(wire.METHODS.values()) <= set(EXPECTED_GRPC)
    assert set(EXPECTED_GRPC.values()) == set(sas.PERMISSIONS)  # no permission unused


@pytest.mark.parametrize("permission", sorted(sas.PERMISSIONS))
@pytest.mark.parametrize("method", sorted(EXPECTED_GRPC))
def test_grpc_method_x_permission(method: str, permission: str) -> None:
    token = sas.mint(ACCOUNT, 1, KEYS[0], [permission], "logs-", int(NOW_S) + 3600, NOW_S)
    claim = _claim(method, token)
    keys_of = {ACCOUNT: KEYS}.get
    if permission == EXPECTED_GRPC[method]:
        assert wire.authenticate(claim, keys_of=keys_of, now_s=NOW_S) is not None
    else:
        with pytest.raises(PermissionDenied, match="does not grant"):
            wire.authenticate(claim, keys_of=keys_of, now_s=NOW_S)


# The Azure Blob endpoint: every operation it serves (frontend/blob_handlers.route), as
# (HTTP method, comp, level), and the service-SAS letter it needs — None: a service SAS never
# admits it (this endpoint takes SAS for reads only; Shared Key for the rest).
EXPECTED_BLOB: dict[tuple[str, str, str], str | None] = {
    ("GET", "", "blob"): "r", ("HEAD", "", "blob"): "r",
    ("GET", "metadata", "blob"): "r", ("HEAD", "metadata", "blob"): "r",
    ("PUT", "", "blob"): None, ("PUT", "appendblock", "blob"): None,
    ("PUT", "seal", "blob"): None, ("PUT", "metadata", "blob"): None,
    ("PUT", "properties", "blob"): None, ("DELETE", "", "blob"): None,
    ("GET", "list", "container"): "l",
    ("PUT", "", "container"): None, ("DELETE", "", "container"): None,
    ("GET", "", "container"): None, ("HEAD", "", "container"): None,
    ("GET", "metadata", "container"): None, ("HEAD", "metadata", "container"): None,
    ("PUT", "metadata", "container"): None,
    ("GET", "list", "account"): None, ("GET", "properties", "account"): None,
    ("HEAD", "properties", "account"): None,
}
AZURE_LETTERS = "racwdl"


def _blob_sas(letters: str, resource: str, container: str, blob: str) -> dict[str, str]:
    """A service SAS as Azure's SDK makes it (blob_auth.check_sas's string to sign)."""
    expiry = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    params = {"sv": "2021-08-06", "sr": resource, "sp": letters, "se": expiry}
    canonical = f"/blob/{ACCOUNT}/{container}" + (f"/{blob}" if resource == "b" else "")
    fields = [params.get(f, "") for f in ("sp", "st", "se")] + [canonical] + [
        params.get(f, "") for f in ("si", "sip", "spr", "sv", "sr", "snapshot", "ses",
                                    "rscc", "rscd", "rsce", "rscl", "rsct")]
    params["sig"] = blob_auth.sign(KEYS[0], "\n".join(fields))
    return params


def _authorize(method: str, comp: str, level: str, letter: str) -> bool:
    container = "" if level == "account" else "box"
    blob = "b1" if level == "blob" else ""
    query = _blob_sas(letter, "b" if level == "blob" else "c", container, blob)
    if comp:
        query["comp"] = comp
    if level == "container":
        query["restype"] = "container"
    http = SimpleNamespace(method=method, headers={}, remote="127.0.0.1", transport=None)

    async def held(account: str, peer: str = "") -> Held | None:
        return Held(KEYS, STAND_ALONE) if account == ACCOUNT else None
    front_end = SimpleNamespace(counters=SimpleNamespace(requests=0),
                                auth=SimpleNamespace(account=held))
    request = blob_request.BlobRequest(http, "id", ACCOUNT, container, blob,  # type: ignore[arg-type]
                                       query)
    try:
        asyncio.run(blob_server.authorize(request, front_end, 900.0))  # type: ignore[arg-type]
    except BlobError as refused:
        assert refused.status in (401, 403), refused
        return False
    return True


@pytest.mark.parametrize("letter", list(AZURE_LETTERS))
@pytest.mark.parametrize("operation", sorted(EXPECTED_BLOB), ids="-".join)
def test_blob_operation_x_permission(operation: tuple[str, str, str], letter: str) -> None:
    admitted = _authorize(*operation, letter)
    assert admitted == (EXPECTED_BLOB[operation] == letter), \
        f"{operation} with a SAS granting {letter!r}: admitted={admitted}"
