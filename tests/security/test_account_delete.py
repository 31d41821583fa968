"""Issue 28, item 6: deleting an account hands nothing of it to anyone. `stamp account delete
NAME` revokes the keys at once (a tombstone replaces the account), removes the account's
data through the partition layer — every entity deleted, the blob endpoint's container and
blob groups included, every log emptied and sealed — and retires the name: `stamp account
create NAME` is refused for ever after (frontend/accounts.py says why). A purge cut short is
finished by running `stamp account delete NAME` again.

One small stamp for the module (one front end with its blob endpoint), its front ends
keeping keys 1 s and its partition clients retrying 5 s, so that a purge waits 6 s for the
old keys to be out of every front end rather than the default 35 s."""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobServiceClient
from stampsdk import Client, connection_string
from stampsdk.errors import StampError, Unauthenticated

from common.clock import SystemClock
from common.errors import NotFound, Sealed, Trimmed
from frontend import sas
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer.client import PartitionClient
from tests.conftest import module_stamp
from tests.support.waiting import wait_until
from tools import account_purge
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow  # one whole stamp for the module

FRONT_END = {"account_cache_ttl_ms": 1000}
PARTITION = {"client_timeout_ms": 5000}
CLI_TIMEOUT_S = 120
KEYS_GONE_S = 2 * FRONT_END["account_cache_ttl_ms"] / 1000


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "account-delete", PARTITION, front_end=FRONT_END,
                      extent_nodes=3, stream_managers=1, lock_servers=1,
                      partition_managers=1, partition_servers=1, front_ends=1) as local:
        yield local


@pytest.fixture(scope="module")
def partitions(stamp: LocalStamp) -> Iterator[PartitionClient]:
    """The partition layer as an operator reaches it: directly, under no account's key."""
    with PartitionClient.from_stamp(str(stamp.data_dir)) as client:
        yield client


def account_cli(stamp: LocalStamp, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                           str(stamp.data_dir), "account", *args],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S)


def succeeded(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def refused_by_sdk(client: Client) -> bool:
    try:
        client.read("orders")
    except Unauthenticated:
        return True
    return False


def blob_service(sdk_line: str, azure_line: str) -> BlobServiceClient:
    """Azure's client for the account, trusting the CA the stamp's SDK connection string
    names when its front ends serve TLS."""
    ca_file = getattr(connection_string.parse(sdk_line), "ca_file", None)
    return BlobServiceClient.from_connection_string(azure_line,
                                                    connection_verify=ca_file or True)


def what_a_client_sees(client: Client, blobs: BlobServiceClient) -> list[str]:
    """The old account's data that `client` and `blobs` can read (the test's names)."""
    seen = []
    for what, read in (("log orders", lambda: client.read("orders")),
                       ("entity users/alice", lambda: client.get("users", "alice")),
                       ("entities", lambda: list(client.scan())),
                       ("containers", lambda: [c.name for c in blobs.list_containers()])):
        try:
            found = read()
        except (StampError, HttpResponseError):
            continue
        if found:
            seen.append(f"{what}: {found}")
    return seen


def test_a_deleted_account_leaves_nothing_to_the_next_owner_of_its_name(
        stamp: LocalStamp, partitions: PartitionClient) -> None:
    sdk_line, azure_line = succeeded(account_cli(stamp, "create", "tenant")).splitlines()
    old = Client.from_connection_string(sdk_line)
    old.append("orders", [b"secret-1", b"secret-2"])
    old.put("users", "alice", b"secret-entity")
    old_blobs = blob_service(sdk_line, azure_line)
    blob = old_blobs.create_container("box").get_blob_client("b")
    blob.create_append_blob()
    blob.append_block(b"secret-blob")
    key = connection_string.parse(sdk_line).key
    assert key is not None
    now_s = time.time()
    token = sas.mint("tenant", 1, key, ["read", "scan"], "", int(now_s) + 600, now_s=now_s)
    with_token = Client.from_connection_string(";".join(
        f"SharedAccessSignature={token}" if part.startswith("Key=") else part
        for part in sdk_line.split(";")))
    assert with_token.read("orders")  # the token works until the delete

    deleted = succeeded(account_cli(stamp, "delete", "tenant"))
    assert "deleted account tenant: removed 2 records from 1 logs" in deleted, deleted
    # users, the blob endpoint's $containers and its blob's group $c/box/GEN
    assert "from 3 entity groups" in deleted, deleted

    # The old keys are refused on both endpoints (within the front ends' key cache TTL).
    for client in (old, with_token):
        wait_until(functools.partial(refused_by_sdk, client), KEYS_GONE_S,
                   "the old key and token refused by the SDK path")
        client.close()
    with pytest.raises(HttpResponseError) as refused:
        list(old_blobs.list_containers())
    assert refused.value.status_code == 403

    again = account_cli(stamp, "create", "tenant")
    if again.returncode == 0:
        sdk_line, azure_line = again.stdout.splitlines()
        with Client.from_connection_string(sdk_line) as new:
            seen = what_a_client_sees(new, blob_service(sdk_line, azure_line))
        pytest.fail(f"the name was given out again, and its new owner reads {seen}")
    assert again.returncode == 1 and "retired" in again.stderr, again.stderr
    assert len(again.stderr.splitlines()) == 1 and not again.stdout

    # The data is gone from the partition layer itself, internal names included.
    assert list(partitions.scan_all("tenant")) == []
    with pytest.raises(NotFound):
        partitions.get("tenant", "users", "alice")
    first, end = partitions.peek("tenant", "orders")
    assert first == end == 2
    with pytest.raises(Trimmed):
        partitions.read("tenant", "orders", 0, 10)
    with pytest.raises(Sealed):
        partitions.append("tenant", "orders", [b"late"])
    with LockClient.from_stamp(str(stamp.data_dir), holder="test-account-delete") as locks:
        assert AccountStore(locks, SystemClock()).tombstone("tenant").purged_s is not None


def test_a_purge_cut_short_is_finished_by_deleting_again(
        stamp: LocalStamp, partitions: PartitionClient) -> None:
    """The purge's functions run on part of the names (as a crash midway would leave it),
    then `stamp account delete` finishes it: the tombstone said a purge was pending."""
    logs, groups = ["log-a", "log-b", "log-c"], ["group-a", "group-b"]
    batch = partitions.aio.limits.batch_ops_max
    rows = batch + 20  # a group takes two batches
    with LockClient.from_stamp(str(stamp.data_dir), holder="test-account-delete") as locks:
        store = AccountStore(locks, SystemClock(), cache_ttl_s=0)
        store.create("midway")
        for log in logs:
            partitions.append("midway", log, [b"x", b"y", b"z"])
        for group in groups:
            for start in range(0, rows, batch):
                partitions.batch("midway", group, [
                    ("put", f"row-{i:04}", b"v") for i in range(start, min(rows, start + batch))])
        store.delete("midway")
        assert partitions.run(account_purge.empty_log(partitions.aio, "midway", "log-a")) == 3
        assert partitions.run(account_purge.empty_entity_group(
            partitions.aio, "midway", "group-a")) == rows
        assert store.tombstone("midway").purged_s is None  # still pending

        resumed = account_cli(stamp, "delete", "midway")
        finished = succeeded(resumed)
        assert "[account delete] sealing and emptying the logs" in resumed.stderr  # progress
        assert "removed 6 records from 2 logs" in finished, finished
        assert f"{rows} entities from 1 entity groups" in finished, finished
        assert store.tombstone("midway").purged_s is not None
    assert list(partitions.scan_all("midway")) == []
    for log in logs:
        first, end = partitions.peek("midway", log)
        assert first == end == 3
    again = succeeded(account_cli(stamp, "delete", "midway"))  # nothing left to remove
    assert "removed 0 records from 0 logs" in again and "0 entities from 0" in again, again
