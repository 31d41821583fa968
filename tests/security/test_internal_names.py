"""Issue 28, item 7: the stamp's own partition names — the Azure Blob endpoint's groups
`$containers` and `$c/CONTAINER/GEN` — are never reachable through the public gRPC API, with
any credential: not by naming them (frontend/names.py), not by a scan of the whole account
with the account's key or with a token whose prefix is empty (frontend/scan.py cuts every
scan to the public names). The blob endpoint, which keeps its containers there, goes on
working: it reaches them through the front end's forwarding client, not the public checks.

One small stamp (one front end) for the module."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from azure.storage.blob import BlobServiceClient

from common.clock import SystemClock
from common.proto import frontend_pb2 as fe_pb
from common.proto import partition_pb2 as pb
from frontend import names, sas, wire
from frontend.accounts import Account, AccountStore
from frontend.blob_model import CONTAINERS_GROUP
from frontend.client import Client
from frontend.scan import request_range
from lock_service.client import LockClient
from partition_layer import keys
from tests.conftest import module_stamp
from tests.front_end_raw import RawFrontEnd, signed
from tools.local_front_ends import azure_connection_string
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow  # one whole stamp for the module


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "internal-names", {}, extent_nodes=3,
                      stream_managers=1, lock_servers=1, partition_managers=1,
                      partition_servers=1, front_ends=1) as local:
        yield local


@pytest.fixture(scope="module")
def account(stamp: LocalStamp) -> Account:
    with LockClient.from_stamp(stamp.data_dir, holder="test-internal") as locks:
        return AccountStore(locks, SystemClock(), cache_ttl_s=0).create("inside")


def test_no_credential_reaches_the_blob_endpoints_groups(stamp: LocalStamp,
                                                         account: Account) -> None:
    fe = stamp.record("fe-1")
    blobs = BlobServiceClient.from_connection_string(
        azure_connection_string(fe, account.name, account.keys[0]) or "")
    blobs.create_container("hidden").get_blob_client("b").create_append_blob()
    now = time.time()
    tokens = {"key": None,
              "token, empty prefix": sas.mint(account.name, 1, account.keys[0],
                                              ["read", "scan", "write"], "",
                                              int(now) + 600, now)}
    raw = RawFrontEnd(fe.address)
    for credential, token in tokens.items():
        with Client([fe.address], account.name,
                    key=None if token else account.keys[0], sas=token) as client:
            client.put("visible", b"r", b"v")
            seen = {entity.pname for entity in client.scan()}
            assert seen == {"visible"}, f"{credential}: a scan saw {seen}"
            credentials = wire.Credentials(account.name, key=None if token else
                                           account.keys[0], sas=token)
            for internal in (CONTAINERS_GROUP, "$c/hidden/0"):  # past the SDK's own checks
                get = pb.Request(account=account.name, pname=internal,
                                 get=pb.GetOp(row=b"hidden"))
                answer = raw.call(signed(get, credentials))
                assert answer.error in ("InvalidArgument", "PermissionDenied"), answer
                assert "stamp's own" in answer.message and not answer.value
    # The endpoint itself still finds its container and blob.
    assert [c.name for c in blobs.list_containers()] == ["hidden"]
    assert [b.name for b in blobs.get_container_client("hidden").list_blobs()] == ["b"]
    raw.close()


def test_a_scan_range_never_covers_an_internal_name() -> None:
    """Pure: whatever bounds a request names, its range starts above every '$' name."""
    internal = keys.encode_key("acct", "$containers", keys.KIND_ENTITY, b"hidden")
    for request in (fe_pb.ScanRequest(account="acct"),
                    fe_pb.ScanRequest(account="acct", start_pname="$containers"),
                    fe_pb.ScanRequest(account="acct", start_pname="$", has_end=True,
                                      end_pname="%")):
        start, end = request_range(request, "")
        assert not start <= internal < end
    assert names.is_internal("$c/x/0") and not sas.covers("", "$containers")
