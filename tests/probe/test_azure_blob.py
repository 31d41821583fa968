"""The Azure Blob REST endpoint of the front ends (issue 20), driven by Azure's own SDK
(`azure-storage-blob`, a client nobody here wrote) against a real stamp: 2 partition
servers, 2 front ends, each test with an account of its own.

Sequences from Azurite's append-blob tests (offsets 0, 6, 12, 13 for appends of 6, 6, 1 and
1 bytes; a new ETag per append; seal, then append -> 409), every operation of the subset and
its errors as the SDK's exceptions.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import itertools
import json
import random
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
)
from azure.core.pipeline import PipelineRequest
from azure.core.pipeline.policies import SansIOHTTPPolicy
from azure.storage.blob import (
    BlobClient,
    BlobPrefix,
    BlobSasPermissions,
    BlobServiceClient,
    ContainerClient,
    ContainerSasPermissions,
    ContentSettings,
    LinearRetry,
    generate_blob_sas,
    generate_container_sas,
)

from common.clock import SystemClock
from common.rpc import arm_remote
from frontend.accounts import Account, AccountStore
from frontend.blob_model import CONTAINERS_GROUP, Container, container_group
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from partition_layer.requests import route_key
from tests.conftest import module_stamp
from tests.support.waiting import wait_until
from tools import local_tls
from tools.local_front_ends import azure_connection_string, blob_endpoint, http_scheme
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow  # one whole stamp for the module
_accounts = itertools.count(1)


@pytest.fixture(scope="module")
def blob_stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    """One stamp for the module; a test that kills a process starts it again."""
    with module_stamp(tmp_path_factory, "azure", {}, extent_nodes=3, stream_managers=1,
                      lock_servers=3, partition_managers=1, partition_servers=2,
                      front_ends=2) as stamp:
        yield stamp


@pytest.fixture(scope="module")
def accounts(blob_stamp: LocalStamp) -> Iterator[AccountStore]:
    with LockClient.from_stamp(blob_stamp.data_dir, holder="test-azure") as locks:
        yield AccountStore(locks, SystemClock(), cache_ttl_s=0)


@pytest.fixture
def account(accounts: AccountStore) -> Account:
    return accounts.create(f"azure-{next(_accounts)}")


def connection_string(stamp: LocalStamp, account: Account, front_end: str = "fe-1",
                      key: bytes | None = None) -> str:
    text = azure_connection_string(stamp.record(front_end), account.name,
                                   key if key is not None else account.keys[0])
    assert text is not None, f"{front_end} has no Azure Blob endpoint in stamp.json"
    return text


@pytest.fixture
def service(blob_stamp: LocalStamp, account: Account) -> BlobServiceClient:
    return BlobServiceClient.from_connection_string(connection_string(blob_stamp, account),
                                                    connection_verify=verify(blob_stamp))


def verify(stamp: LocalStamp) -> str | bool:
    """What the Azure SDK checks the blob endpoint's certificate against over HTTPS (a
    stamp with TLS): the stamp's CA file (True: the system's roots)."""
    return local_tls.ca_file(stamp) or True


def https_context(stamp: LocalStamp) -> ssl.SSLContext | None:
    """The same for urllib (None: plain HTTP, or the system's roots)."""
    ca_file = local_tls.ca_file(stamp)
    return ssl.create_default_context(cafile=ca_file) if ca_file else None


def test_azurite_append_sequence_offsets_etags_and_seal(service: BlobServiceClient) -> None:
    container = service.create_container("logs")
    blob = container.get_blob_client("audit.log")
    created = blob.create_append_blob()
    etags = [created["etag"]]
    offsets = []
    for data in (b"abcdef", b"123456", b"x", b"y"):
        answer = blob.append_block(data)
        offsets.append(int(answer["blob_append_offset"]))
        assert int(answer["blob_committed_block_count"]) == len(offsets)
        etags.append(answer["etag"])
    assert offsets == [0, 6, 12, 13]
    assert len(set(etags)) == len(etags)  # a new ETag per append
    assert blob.download_blob().readall() == b"abcdef123456xy"
    props = blob.get_blob_properties()
    assert props.size == 14 and props.blob_type == "AppendBlob" and props.etag == etags[-1]
    assert props.append_blob_committed_block_count == 4 and not props.is_append_blob_sealed
    sealed = blob.seal_append_blob()
    assert sealed["blob_sealed"] is True
    assert blob.get_blob_properties().is_append_blob_sealed
    with pytest.raises(ResourceExistsError) as refused:  # 409 BlobIsSealed
        blob.append_block(b"z")
    assert refused.value.error_code == "BlobIsSealed"
    assert blob.download_blob().readall() == b"abcdef123456xy"


def test_ranged_reads_206_and_416(service: BlobServiceClient) -> None:
    blob = service.create_container("ranges").get_blob_client("r")
    blob.create_append_blob()
    data = bytes(range(256)) * 40
    for at in range(0, len(data), 1000):
        blob.append_block(data[at:at + 1000])
    assert blob.download_blob(offset=1500, length=3000).readall() == data[1500:4500]
    assert blob.download_blob(offset=len(data) - 7).readall() == data[-7:]
    with pytest.raises(HttpResponseError) as past_end:
        blob.download_blob(offset=len(data), length=10)
    assert past_end.value.status_code == 416


def test_containers_create_list_properties_delete(service: BlobServiceClient) -> None:
    for name in ("alpha", "alpine", "beta"):
        service.create_container(name, metadata={"owner": name})
    with pytest.raises(ResourceExistsError) as again:
        service.create_container("alpha")
    assert again.value.error_code == "ContainerAlreadyExists"
    assert [c.name for c in service.list_containers()] == ["alpha", "alpine", "beta"]
    assert [c.name for c in service.list_containers(name_starts_with="alp")] == [
        "alpha", "alpine"]
    pages = service.list_containers(results_per_page=2).by_page()
    assert [[c.name for c in page] for page in pages] == [["alpha", "alpine"], ["beta"]]
    props = service.get_container_client("alpha").get_container_properties()
    assert props.metadata == {"owner": "alpha"} and props.etag
    service.delete_container("alpha")
    with pytest.raises(ResourceNotFoundError) as gone:
        service.get_container_client("alpha").get_container_properties()
    assert gone.value.error_code == "ContainerNotFound"
    with pytest.raises(ResourceNotFoundError) as no_container:
        service.get_container_client("alpha").get_blob_client("b").create_append_blob()
    assert no_container.value.error_code == "ContainerNotFound"
    assert [c.name for c in service.list_containers()] == ["alpine", "beta"]


def test_a_deleted_container_made_again_is_empty(service: BlobServiceClient) -> None:
    container = service.create_container("again")
    container.get_blob_client("old").create_append_blob()
    container.delete_container()
    deadline = time.monotonic() + 30
    while True:  # the name is held for a moment (ContainerBeingDeleted), as the service does
        try:
            container = service.create_container("again")
            break
        except ResourceExistsError as exc:
            assert exc.error_code == "ContainerBeingDeleted"
            assert time.monotonic() < deadline, "the name was held for 30 s"
            time.sleep(0.2)
    assert list(container.list_blobs()) == []


def test_blob_errors_metadata_and_delete(service: BlobServiceClient) -> None:
    container = service.create_container("things")
    blob = container.get_blob_client("b1")
    with pytest.raises(ResourceNotFoundError) as missing:
        blob.append_block(b"data")
    assert missing.value.error_code == "BlobNotFound"
    with pytest.raises(ResourceNotFoundError):
        blob.get_blob_properties()
    blob.create_append_blob(metadata={"kind": "audit"},
                            content_settings=ContentSettings(content_type="text/plain"))
    with pytest.raises(ResourceExistsError) as exists:  # If-None-Match: *
        blob.create_append_blob(match_condition=MatchConditions.IfMissing)
    assert exists.value.error_code == "BlobAlreadyExists"
    props = blob.get_blob_properties()
    assert props.metadata == {"kind": "audit"}
    assert props.content_settings.content_type == "text/plain"
    changed = blob.set_blob_metadata({"kind": "trail", "n": "2"})
    assert changed["etag"] != props.etag
    assert blob.get_blob_properties().metadata == {"kind": "trail", "n": "2"}
    with pytest.raises(HttpResponseError) as block_blob:  # append blobs only, here
        container.get_blob_client("b2").upload_blob(b"data")
    assert (block_blob.value.status_code, block_blob.value.error_code) == (
        400, "InvalidHeaderValue")
    blob.delete_blob()
    with pytest.raises(ResourceNotFoundError) as deleted:
        blob.download_blob()
    assert deleted.value.error_code == "BlobNotFound"



def test_deleted_and_replaced_blobs_and_containers_leave_no_records(
        blob_stamp: LocalStamp, account: Account, service: BlobServiceClient) -> None:
    container = service.create_container("swept")
    for name in ("deleted", "replaced", "kept"):
        blob = container.get_blob_client(name)
        blob.create_append_blob()
        blob.append_block(name.encode() * 1000)
    with PartitionClient.from_stamp(str(blob_stamp.data_dir)) as pc:
        gen = Container.decode(pc.get(account.name, CONTAINERS_GROUP, "swept")[0]).gen
        group = container_group("swept", gen)

        def records_of(name: str) -> list[object]:
            prefix = f"d/{name}\x00".encode()
            return pc.scan(account.name, (group, prefix), (group, prefix + b"\xff"))

        assert all(records_of(name) for name in ("deleted", "replaced", "kept"))
        container.get_blob_client("deleted").delete_blob()
        container.get_blob_client("replaced").create_append_blob()  # a new, empty one
        wait_until(lambda: not records_of("deleted") and not records_of("replaced"), 30,
                   "the records of the deleted and the replaced blob swept")
        assert records_of("kept")
        assert container.get_blob_client("kept").download_blob().readall() == b"kept" * 1000
        assert container.get_blob_client("replaced").get_blob_properties().size == 0
        container.delete_container()
        wait_until(lambda: not pc.scan(account.name, (group, b"\x00"), (group, b"\xff")), 30,
                   "the deleted container's rows swept")


def test_append_conditions(service: BlobServiceClient) -> None:
    blob = service.create_container("conds").get_blob_client("c")
    etag = blob.create_append_blob()["etag"]
    etag = blob.append_block(b"12345", appendpos_condition=0, etag=etag,
                             match_condition=MatchConditions.IfNotModified)["etag"]
    # 412s the SDK raises as HttpResponseError (it does so against the service too)
    with pytest.raises(HttpResponseError) as position:
        blob.append_block(b"678", appendpos_condition=4)
    assert position.value.status_code == 412
    assert position.value.error_code == "AppendPositionConditionNotMet"
    with pytest.raises(HttpResponseError) as size:
        blob.append_block(b"678", maxsize_condition=7)
    assert size.value.status_code == 412
    assert size.value.error_code == "MaxBlobSizeConditionNotMet"
    with pytest.raises(ResourceModifiedError) as stale:
        blob.append_block(b"678", etag='"0x1"', match_condition=MatchConditions.IfNotModified)
    assert stale.value.error_code == "ConditionNotMet"
    with pytest.raises(HttpResponseError) as unchanged:
        blob.download_blob(etag=etag, match_condition=MatchConditions.IfModified)
    assert unchanged.value.status_code == 304
    with pytest.raises(HttpResponseError) as unchanged_props:
        blob.get_blob_properties(etag=etag, match_condition=MatchConditions.IfModified)
    assert unchanged_props.value.status_code == 304
    an_hour_ago = datetime.now(UTC) - timedelta(hours=1)
    with pytest.raises(ResourceModifiedError):  # If-Unmodified-Since: it was modified since
        blob.append_block(b"678", if_unmodified_since=an_hour_ago)
    with pytest.raises(HttpResponseError) as not_since:  # If-Modified-Since, a read: 304
        blob.get_blob_properties(if_modified_since=datetime.now(UTC) + timedelta(hours=1))
    assert not_since.value.status_code == 304
    assert blob.get_blob_properties(if_modified_since=an_hour_ago).size == 5
    with pytest.raises(HttpResponseError) as leased:  # no leases here: none is held
        blob.append_block(b"678", lease="0f6c3f2e-ca4f-11f0-a5b2-0242ac110002")
    assert (leased.value.status_code, leased.value.error_code) == (
        412, "LeaseNotPresentWithBlobOperation")
    answer = blob.append_block(b"678", appendpos_condition=5, maxsize_condition=8)
    assert int(answer["blob_append_offset"]) == 5
    assert blob.download_blob().readall() == b"12345678"


def _tamper_body(request: PipelineRequest) -> None:
    """After the SDK computed the body's checksum header: change the body."""
    request.http_request.data = b"X" * len(request.http_request.data)


def test_content_md5_and_crc64_are_checked(service: BlobServiceClient) -> None:
    blob = service.create_container("sums").get_blob_client("s")
    blob.create_append_blob()
    blob.append_block(b"good", validate_content=True)  # Content-MD5
    blob.append_block(b"crc!", validate_content="crc64")  # x-ms-content-crc64
    with pytest.raises(HttpResponseError) as md5:
        blob.append_block(b"bad1", validate_content=True, raw_request_hook=_tamper_body)
    assert md5.value.status_code == 400 and md5.value.error_code == "Md5Mismatch"
    with pytest.raises(HttpResponseError) as crc:
        blob.append_block(b"bad2", validate_content="crc64", raw_request_hook=_tamper_body)
    assert crc.value.status_code == 400 and crc.value.error_code == "Crc64Mismatch"

    def both(request: PipelineRequest) -> None:
        data = request.http_request.data
        request.http_request.headers["Content-MD5"] = base64.b64encode(
            hashlib.md5(data).digest()).decode()

    with pytest.raises(HttpResponseError) as two:
        blob.append_block(b"two!", validate_content="crc64", raw_request_hook=both)
    assert two.value.status_code == 400 and two.value.error_code == "InvalidHeaderValue"
    with pytest.raises(HttpResponseError) as large:
        blob.append_block(b"x" * (4 * 1024 * 1024 + 1))
    assert large.value.status_code == 413 and large.value.error_code == "RequestBodyTooLarge"
    assert blob.download_blob().readall() == b"goodcrc!"


def test_list_blobs_prefix_and_pages(service: BlobServiceClient) -> None:
    container = service.create_container("listing")
    names = ["a/1", "a/2", "a/3", "b/1", "c"]
    for name in names:
        container.get_blob_client(name).create_append_blob(metadata={"n": name[-1]})
    container.get_blob_client("a/2").append_block(b"four")
    listed = list(container.list_blobs(include=["metadata"]))
    assert [b.name for b in listed] == names
    assert listed[1].size == 4 and listed[1].blob_type == "AppendBlob"
    assert listed[0].metadata == {"n": "1"}
    assert [b.name for b in container.list_blobs(name_starts_with="a/")] == names[:3]
    pages = container.list_blobs(results_per_page=2).by_page()
    assert [[b.name for b in page] for page in pages] == [names[:2], names[2:4], names[4:]]
    top = list(container.walk_blobs(delimiter="/"))  # a hierarchical listing
    assert [(b.name, isinstance(b, BlobPrefix)) for b in top] == [
        ("a/", True), ("b/", True), ("c", False)]
    assert [b.name for b in container.walk_blobs(name_starts_with="a/", delimiter="/")] == \
        names[:3]
    pages = container.list_blobs(results_per_page=1).by_page()  # every page of one
    assert [b.name for page in pages for b in page] == names


def test_wrong_key_tampered_request_and_expired_sas_are_refused(
        blob_stamp: LocalStamp, account: Account, service: BlobServiceClient) -> None:
    container = service.create_container("guarded")
    blob = container.get_blob_client("g")
    blob.create_append_blob()
    blob.append_block(b"secret")
    wrong = BlobServiceClient.from_connection_string(
        connection_string(blob_stamp, account, key=b"k" * 32),
        connection_verify=verify(blob_stamp))
    with pytest.raises(ClientAuthenticationError):
        wrong.get_container_client("guarded").get_blob_client("g").append_block(b"evil")
    with pytest.raises(ClientAuthenticationError):
        wrong.create_container("intruder")

    class Tamper(SansIOHTTPPolicy):  # after signing: the request is not what was signed
        def on_request(self, request: PipelineRequest) -> None:
            request.http_request.url = request.http_request.url.replace("/guarded/g",
                                                                        "/guarded/h")

    tampered = BlobServiceClient.from_connection_string(
        connection_string(blob_stamp, account), _additional_pipeline_policies=[Tamper()],
        connection_verify=verify(blob_stamp))
    with pytest.raises(ClientAuthenticationError):
        tampered.get_container_client("guarded").get_blob_client("g").create_append_blob()
    assert [b.name for b in container.list_blobs()] == ["g"]  # nothing written
    assert blob.download_blob().readall() == b"secret"

    def sas_blob(expiry: datetime, permission: BlobSasPermissions) -> BlobClient:
        token = generate_blob_sas(account.name, "guarded", "g",
                                  account_key=base64.b64encode(account.keys[1]).decode(),
                                  permission=permission, expiry=expiry)
        url = f"{blob_endpoint(blob_stamp.record('fe-2'), account.name)}/guarded/g?{token}"
        return BlobClient.from_blob_url(url, connection_verify=verify(blob_stamp))

    hour = datetime.now(UTC) + timedelta(hours=1)
    reader = sas_blob(hour, BlobSasPermissions(read=True))
    assert reader.download_blob().readall() == b"secret"  # signed with key 2, via fe-2
    assert reader.download_blob(offset=2, length=3).readall() == b"cre"
    with pytest.raises(HttpResponseError) as write:  # a valid token, not for writes
        reader.append_block(b"evil")
    assert (write.value.status_code, write.value.error_code) == (
        403, "AuthorizationPermissionMismatch")
    # The plain HTTP Range header too, answered as the service answers
    ranged = urllib.request.Request(reader.url, headers={"Range": "bytes=1-3",
                                                         "x-ms-version": "2021-08-06"})
    with urllib.request.urlopen(ranged, timeout=30,
                                context=https_context(blob_stamp)) as answer:
        assert answer.status == 206 and answer.read() == b"ecr"
        assert answer.headers["Content-Range"] == "bytes 1-3/6"
        assert answer.headers["x-ms-version"] == "2021-08-06"  # echoed
        assert answer.headers["x-ms-request-id"] and answer.headers["ETag"].startswith('"0x')
    past = urllib.request.Request(reader.url, headers={"Range": "bytes=6-"})
    with pytest.raises(urllib.error.HTTPError) as unsatisfiable:
        urllib.request.urlopen(past, timeout=30, context=https_context(blob_stamp))
    assert unsatisfiable.value.code == 416
    assert unsatisfiable.value.headers["x-ms-error-code"] == "InvalidRange"
    expired = sas_blob(datetime.now(UTC) - timedelta(minutes=1), BlobSasPermissions(read=True))
    with pytest.raises(ClientAuthenticationError):
        expired.download_blob()
    listing = generate_container_sas(account.name, "guarded",
                                     account_key=base64.b64encode(account.keys[0]).decode(),
                                     permission=ContainerSasPermissions(list=True), expiry=hour)
    lister = ContainerClient.from_container_url(
        f"{blob_endpoint(blob_stamp.record('fe-1'), account.name)}/guarded?{listing}",
        connection_verify=verify(blob_stamp))
    assert [b.name for b in lister.list_blobs()] == ["g"]
    no_read = sas_blob(hour, BlobSasPermissions(write=True))
    with pytest.raises(HttpResponseError) as unread:
        no_read.download_blob()
    assert (unread.value.status_code, unread.value.error_code) == (
        403, "AuthorizationPermissionMismatch")
    assert blob.download_blob().readall() == b"secret"



def test_stamp_account_create_prints_an_azure_connection_string(
        blob_stamp: LocalStamp) -> None:
    done = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                           str(blob_stamp.data_dir), "account", "create", "cli-azure"],
                          capture_output=True, text=True, timeout=120, check=True)
    stamp_line, azure_line = done.stdout.splitlines()
    assert stamp_line.startswith("Endpoint=")
    fields = dict(part.split("=", 1) for part in azure_line.rstrip(";").split(";"))
    address = json.loads((blob_stamp.data_dir / "stamp.json").read_text())[
        "processes"]["fe-1"]["extra"]["http_address"]
    scheme = http_scheme(blob_stamp.record("fe-1"))
    assert fields["BlobEndpoint"] == f"{scheme}://{address}/cli-azure"
    assert fields["AccountName"] == "cli-azure" and fields["DefaultEndpointsProtocol"] == scheme
    service = BlobServiceClient.from_connection_string(azure_line,
                                                       connection_verify=verify(blob_stamp))
    blob = service.create_container("from-cli").get_blob_client("b")
    blob.create_append_blob()
    blob.append_block(b"hello")
    assert blob.download_blob().readall() == b"hello"


def test_comp_is_routed_before_the_blob_type_header(service: BlobServiceClient) -> None:
    """An SDK has been seen sending x-ms-blob-type on Append Block: still an append."""
    blob = service.create_container("routing").get_blob_client("r")
    blob.create_append_blob()

    def typed(request: PipelineRequest) -> None:
        request.http_request.headers["x-ms-blob-type"] = "AppendBlob"

    blob.append_block(b"one", raw_request_hook=typed)
    blob.append_block(b"two", raw_request_hook=typed)
    assert blob.download_blob().readall() == b"onetwo"


def test_upload_20_mib_in_chunks_then_download_whole_and_by_range(
        service: BlobServiceClient, rng: random.Random) -> None:
    data = rng.randbytes(20 * 1024 * 1024)
    blob = service.create_container("big").get_blob_client("twenty")
    blob.upload_blob(data, blob_type="AppendBlob")  # 4 MiB Append Blocks with appendpos
    props = blob.get_blob_properties()
    assert props.size == len(data) and props.append_blob_committed_block_count == 5
    assert blob.download_blob(max_concurrency=2).readall() == data
    for _ in range(8):  # ranges across the 1 MiB records and the 4 MiB appends
        start = rng.randrange(len(data))
        length = rng.randrange(1, 3 * 1024 * 1024)
        assert blob.download_blob(offset=start, length=length).readall() == \
            data[start:start + length]


def test_concurrent_appenders_with_appendpos_exactly_one_wins_each_position(
        blob_stamp: LocalStamp, service: BlobServiceClient) -> None:
    blob = service.create_container("race").get_blob_client("r")
    blob.create_append_blob()
    appenders, rounds, size = 6, 8, 9
    barrier = threading.Barrier(appenders)
    wins: dict[int, list[int]] = collections.defaultdict(list)
    failures: list[BaseException] = []

    def appender(index: int) -> None:
        try:
            appends(index)
        except BaseException as exc:
            failures.append(exc)
            barrier.abort()

    def appends(index: int) -> None:
        mine = BlobClient(service.url, "race", "r", credential=service.credential,
                          connection_verify=verify(blob_stamp))
        for turn in range(rounds):
            barrier.wait(timeout=60)
            payload = f"{index:02d}-{turn:06d}".encode()
            assert len(payload) == size
            try:
                mine.append_block(payload, appendpos_condition=turn * size)
                wins[turn].append(index)
            except HttpResponseError as exc:
                assert (exc.status_code, exc.error_code) == (
                    412, "AppendPositionConditionNotMet")

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    assert all(len(wins[turn]) == 1 for turn in range(rounds)), dict(wins)
    expected = b"".join(f"{wins[t][0]:02d}-{t:06d}".encode() for t in range(rounds))
    assert blob.download_blob().readall() == expected



def test_concurrent_appenders_without_conditions_each_land_once(
        blob_stamp: LocalStamp, service: BlobServiceClient) -> None:
    """Appends without a position race for the blob's properties row; the losers decide
    again on what the winner left: every block lands, once, whole."""
    blob = service.create_container("crowd").get_blob_client("c")
    blob.create_append_blob()
    appenders, each = 8, 12
    failures: list[BaseException] = []

    def appender(index: int) -> None:
        mine = BlobClient(service.url, "crowd", "c", credential=service.credential,
                          connection_verify=verify(blob_stamp))
        try:
            for turn in range(each):
                mine.append_block(f"[{index}:{turn:03d}]".encode())
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=appender, args=(i,)) for i in range(appenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    data = blob.download_blob().readall().decode()
    blocks = data[1:-1].split("][")
    assert sorted(blocks) == sorted(f"{i}:{t:03d}" for i in range(appenders)
                                    for t in range(each))
    for index in range(appenders):  # each appender's blocks in its own order
        mine = [b for b in blocks if b.startswith(f"{index}:")]
        assert mine == sorted(mine)
    assert blob.get_blob_properties().append_blob_committed_block_count == appenders * each


def test_an_sdk_upload_survives_sigkill_of_its_partition_server_and_front_end(
        blob_stamp: LocalStamp, account: Account, rng: random.Random) -> None:
    """The SDK's own retries finish the upload; the blob is exactly the bytes uploaded.
    fe-1 crashes right after an append committed, before answering it: the SDK retries it
    (appendpos, same bytes) and it is answered as done, not appended twice nor refused."""
    retry = LinearRetry(backoff=0.5, random_jitter_range=0.2, retry_total=60,
                        retry_connect=60, retry_read=10, retry_status=20)
    uploader = BlobServiceClient.from_connection_string(
        connection_string(blob_stamp, account, "fe-1"), retry_policy=retry,
        max_block_size=256 * 1024, connection_verify=verify(blob_stamp))
    watcher = BlobServiceClient.from_connection_string(
        connection_string(blob_stamp, account, "fe-2"), connection_verify=verify(blob_stamp))
    uploader.create_container("survivor")
    data = rng.randbytes(12 * 1024 * 1024)  # 48 Append Blocks
    outcome: list[BaseException | None] = []

    def upload() -> None:
        try:
            uploader.get_blob_client("survivor", "s").upload_blob(data, blob_type="AppendBlob")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    arm_remote(blob_stamp.address("fe-1"), "fe.blob.append.before_answer=crash,after=8")
    thread = threading.Thread(target=upload)
    thread.start()
    wait_until(lambda: not blob_stamp.alive("fe-1"), 60, "fe-1 crashing after an append")
    watched = watcher.get_blob_client("survivor", "s")
    at_crash = _size(watched)
    with PartitionClient.from_stamp(str(blob_stamp.data_dir)) as pc:
        gen = Container.decode(pc.get(account.name, CONTAINERS_GROUP, "survivor")[0]).gen
        key = route_key(account.name, container_group("survivor", gen))
        server = pc.partition_map()[0].lookup(key).server
    blob_stamp.kill(server)
    blob_stamp.forget_dead()
    blob_stamp.start("fe-1")  # on the ports it had: the SDK's endpoint
    blob_stamp.start(server)
    thread.join(timeout=240)
    assert not thread.is_alive(), "the upload did not finish in 240 s"
    assert outcome == [None], outcome
    assert 0 < at_crash < len(data)
    assert watched.download_blob().readall() == data


def _size(blob: BlobClient) -> int:
    try:
        return blob.get_blob_properties().size
    except ResourceNotFoundError:
        return 0
