"""Issue 28, item 4: TLS. Inside a stamp every connection is mutual TLS with certificates of
the stamp's CA, so a caller without one — no TLS at all, or a certificate of another CA — is
refused by the lock service (whose `Get` returns account keys) and by a partition server; the
operator's certificate (`<data dir>/tls/operator.crt`, what the CLI and tests use) works. The
front end's door is server-only TLS: the SDK with the stamp's CA file works, and so does the
Azure SDK over HTTPS. Keys are 0600 and no key material is in stamp.json or a command line.
Real processes: one small whole stamp with `[security] tls = true`, shared by the module."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import stat
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from azure.storage.blob import BlobServiceClient
from stampsdk import Client, connection_string
from stampsdk.errors import DeadlineExceeded, StampError, Unavailable

from common import health, rpc, tls
from common.clock import SystemClock
from common.config import SecurityConfig
from common.proto import frontend_pb2 as fe_pb
from common.proto import frontend_pb2_grpc as fe_grpc
from common.proto import lock_service_pb2 as lock_pb
from common.proto import lock_service_pb2_grpc as lock_grpc
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from frontend.accounts import KEY_PREFIX, AccountStore
from lock_service.client import LockClient
from tests.conftest import check_raft_logs, config_toml, stamp_config
from tools.local_front_ends import azure_connection_string
from tools.local_stamp import ADMIN_ACCOUNT, LocalStamp

pytestmark = pytest.mark.slow

MESSAGE_BYTES_MAX = 4 * 1024 * 1024
TLS = True  # the stamp under test (False: shows each test fail without TLS)


@pytest.fixture(scope="module", params=["stamp certificate", "public certificate"])
def stamp(request: pytest.FixtureRequest,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    """One process of every kind, TLS on whatever the loopback default is; its front end
    shows its certificate of the stamp's CA, or (`[security] front_end_cert`) a public one
    of another CA that clients trust instead."""
    root: Path = tmp_path_factory.mktemp("tls")
    security = SecurityConfig(tls=TLS)
    if request.param == "public certificate":
        public = root / "public"  # a CA the world trusts, as far as the clients know
        tls.make_ca(public, "Public CA")
        tls.issue(public, "door", ["127.0.0.1"])
        security = SecurityConfig(tls=TLS, front_end_cert=str(tls.cert_path(public, "door")),
                                  front_end_key=str(tls.key_path(public, "door")),
                                  front_end_ca=str(tls.cert_path(public, tls.CA)))
    (root / "stamp.toml").write_text(config_toml() + "[security]\n" + "".join(
        f"{f.name} = {json.dumps(getattr(security, f.name))}\n"
        for f in dataclasses.fields(security)))
    config = dataclasses.replace(
        stamp_config(3, 1, lock_servers=1, partition_managers=1, partition_servers=1,
                     front_ends=1), security=security)
    local = LocalStamp(root / "stamp", config, str(root / "stamp.toml"))
    try:
        local.up()
        yield local
    finally:
        local.kill_all()
    check_raft_logs(local.data_dir)


def door_ca(stamp: LocalStamp) -> str:
    """The CA file clients of the stamp's front ends trust."""
    return (stamp.config.security.front_end_ca
            or str(tls.cert_path(tls.dir_in(stamp.data_dir), tls.CA)))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> tls.Identity:
    """A client certificate of another CA (another stamp's operator)."""
    other = tmp_path_factory.mktemp("other-ca")
    tls.make_ca(other)
    tls.issue(other, tls.OPERATOR, [], server=False)
    return tls.load(other, tls.OPERATOR)


Credentials = Callable[[str], "grpc.ChannelCredentials | None"]


def _plain(_address: str) -> None:
    return None


def callers(stranger: tls.Identity) -> dict[str, Credentials]:
    other = stranger.channel_credentials()
    return {"plain": _plain, "other CA": lambda _address: other}


def lock_get(address: str, credentials: Credentials) -> lock_pb.GetReply:
    with rpc.sync_channel(address, MESSAGE_BYTES_MAX, credentials) as channel:
        return lock_grpc.LockServiceStub(channel).Get(
            lock_pb.GetRequest(key=KEY_PREFIX + ADMIN_ACCOUNT), timeout=10)


def ps_status(address: str, credentials: Credentials) -> pb.ServerLoad:
    with rpc.sync_channel(address, MESSAGE_BYTES_MAX, credentials) as channel:
        return pb_grpc.PartitionServerStub(channel).Status(pb.ServerStatusRequest(),
                                                           timeout=10)


def test_the_lock_service_gives_account_keys_only_to_the_stamps_certificates(
        stamp: LocalStamp, stranger: tls.Identity) -> None:
    address = stamp.address("lock-1")
    for label, credentials in callers(stranger).items():
        with pytest.raises(grpc.RpcError) as refused:
            lock_get(address, credentials)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, label
    assert lock_get(address, tls.channel_credentials).found  # the operator's certificate


def test_a_partition_server_answers_only_the_stamps_certificates(
        stamp: LocalStamp, stranger: tls.Identity) -> None:
    address = stamp.address("ps-1")
    for label, credentials in callers(stranger).items():
        with pytest.raises(grpc.RpcError) as refused:
            ps_status(address, credentials)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE, label
    assert ps_status(address, tls.channel_credentials).partitions


def test_the_sdk_reaches_the_front_end_with_the_doors_ca_file(
        stamp: LocalStamp, stranger: tls.Identity, tmp_path: Path) -> None:
    text = stamp.admin_connection_string_file.read_text().strip()
    parsed = connection_string.parse(text)
    assert parsed.ca_file == door_ca(stamp)
    with Client.from_connection_string(text, timeout_s=20) as client:
        first = client.append("tls-log", [b"over TLS"])
        assert client.read("tls-log", first, 1) == [(first, b"over TLS")]
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(stranger.ca)
    wrong = [str(other_ca)]  # and the stamp's own CA, when the door shows a public certificate
    if stamp.config.security.front_end_cert:
        wrong.append(str(tls.cert_path(tls.dir_in(stamp.data_dir), tls.CA)))
    for ca_file in wrong:
        with Client(parsed.endpoints, parsed.account, key=parsed.key, timeout_s=2,
                    ca_file=ca_file) as client, pytest.raises(StampError) as refused:
            client.peek("tls-log")
        assert isinstance(refused.value, Unavailable | DeadlineExceeded), refused.value
    with rpc.sync_channel(stamp.address("fe-1"), MESSAGE_BYTES_MAX, _plain) as channel, \
            pytest.raises(grpc.RpcError) as plain:
        fe_grpc.FrontEndStub(channel).Status(fe_pb.FrontEndStatusRequest(), timeout=10)
    assert plain.value.code() == grpc.StatusCode.UNAVAILABLE


def test_stamp_account_create_prints_connection_strings_that_work(stamp: LocalStamp) -> None:
    made = subprocess.run([sys.executable, "-m", "tools.cli", "--data-dir",
                           str(stamp.data_dir), "account", "create", "tls-cli"],
                          capture_output=True, text=True, timeout=60, check=True)
    sdk_line, azure_line = made.stdout.split()
    ca_file = door_ca(stamp)
    assert sdk_line.endswith(f";CaFile={ca_file}")
    assert azure_line.startswith("DefaultEndpointsProtocol=https;")
    with Client.from_connection_string(sdk_line, timeout_s=20) as client:
        assert client.append("cli-log", [b"x"]) == 0


def test_the_blob_endpoint_speaks_https_to_the_azure_sdk(stamp: LocalStamp) -> None:
    front_end = stamp.record("fe-1")
    ca_file = door_ca(stamp)
    with LockClient.from_stamp(stamp.data_dir, holder="test-tls") as locks:
        account = AccountStore(locks, SystemClock(), cache_ttl_s=0).create("tls-azure")
    text = azure_connection_string(front_end, account.name, account.keys[0])
    assert text is not None and "BlobEndpoint=https://" in text
    service = BlobServiceClient.from_connection_string(text, connection_verify=ca_file)
    blob = service.create_container("tls").get_blob_client("b")
    blob.create_append_blob()
    blob.append_block(b"over HTTPS")
    assert blob.download_blob().readall() == b"over HTTPS"
    plain = f"http://{front_end.extra['http_address']}/{account.name}?comp=list"
    with pytest.raises(OSError):  # plain HTTP gets no answer (a reset or a bad status line)
        urllib.request.urlopen(plain, timeout=10)


def test_the_health_service_answers_the_operator_over_tls(stamp: LocalStamp) -> None:
    """What `stamp status` asks every process (common/health.py's own channel)."""
    found = asyncio.run(health.check_many([r.address for r in stamp.records.values()], 5.0))
    assert set(found.values()) == {health.SERVING}, found


def test_keys_are_private_and_nowhere_else(stamp: LocalStamp) -> None:
    directory = tls.dir_in(stamp.data_dir)
    keys = sorted(directory.glob("*.key"))
    assert {k.stem for k in keys} == {tls.CA, tls.OPERATOR, *stamp.records}
    assert all(stat.S_IMODE(k.stat().st_mode) == 0o600 for k in keys)
    record = stamp.stamp_file.read_text()
    assert json.loads(record)["tls"] == str(directory)
    assert b"PRIVATE KEY" not in record.encode()
    for key in keys:
        body = b"".join(key.read_bytes().splitlines()[1:-1])
        assert body.decode() not in record
        assert all(body.decode() not in arg for rec in stamp.records.values()
                   for arg in rec.argv)
