"""The front ends of a local stamp (§6, §9), for tools/local_stamp.py: planned once the
partition managers have their addresses, waited for until they answer, and the admin account
whose connection string `stamp up` leaves in the data directory.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from common import durable_fs, process
from common.errors import Unavailable
from tools import local_tls
from tools.process_record import ProcessRecord

if TYPE_CHECKING:
    from tools.local_stamp import LocalStamp

KIND_FRONT_END = "front-end"


def plan(stamp: LocalStamp) -> None:
    """Record each configured front end not yet recorded: its directory, port and command
    line, naming the lock service (account keys) and the partition managers (the map)."""
    lock_addresses = ",".join(r.address for r in stamp.lock_servers())
    pm_addresses = ",".join(r.address for r in stamp.partition_managers())
    if not (lock_addresses and pm_addresses):
        return
    for spec in stamp.config.front_ends:
        if spec.name in stamp.records:
            continue
        proc_dir = stamp.data_dir / spec.name
        host = stamp.config.host_of(spec.name)
        # Port 0: the process binds a free port itself; LocalStamp pins it for restarts.
        argv = process.stamp_command(
            "serve", KIND_FRONT_END, "--name", spec.name, "--dir", str(proc_dir),
            "--host", host, "--port", str(spec.port), "--http-port", "0", "--pm", pm_addresses,
            "--lock", lock_addresses, *stamp.server_flags(), *local_tls.public_flags(stamp))
        if stamp.config_path:
            argv += ["--config", stamp.config_path]
        stamp.records[spec.name] = ProcessRecord(spec.name, KIND_FRONT_END, str(proc_dir),
                                                 argv, address=f"{host}:{spec.port}")


def record_http(rec: ProcessRecord) -> None:
    """After a front end is ready: its Azure Blob REST address into the record
    (`extra["http_address"]`, in stamp.json), and the port it picked pinned for restarts
    (the SDK's connection string names it)."""
    from frontend.blob_server import read_http_ready

    address = read_http_ready(rec.dir, rec.pid)
    if address is None:
        return
    rec.extra["http_address"] = address
    if "--http-port" in rec.argv:
        at = rec.argv.index("--http-port") + 1
        rec.argv[at] = address.rpartition(":")[2]


def http_scheme(rec: ProcessRecord) -> str:
    """https when the front end serves TLS (a stamp certificate or a public one)."""
    return "https" if {local_tls.TLS_DIR_ARG, "--public-cert"} & set(rec.argv) else "http"


def blob_endpoint(rec: ProcessRecord, account: str) -> str | None:
    """The Azure BlobEndpoint URL of `account` at front end `rec` (None: it has none)."""
    address = rec.extra.get("http_address")
    return f"{http_scheme(rec)}://{address}/{account}" if address else None


def azure_connection_string(rec: ProcessRecord, account: str, key: bytes) -> str | None:
    """The connection string of Azure's SDKs for `account` at front end `rec`."""
    import base64

    endpoint = blob_endpoint(rec, account)
    if endpoint is None:
        return None
    return (f"DefaultEndpointsProtocol={http_scheme(rec)};AccountName={account};"
            f"AccountKey={base64.b64encode(key).decode()};BlobEndpoint={endpoint};")


def wait_answering(stamp: LocalStamp, timeout_s: float) -> None:
    """Until every live front end answers Status; Unavailable after `timeout_s`."""
    import grpc

    from common.proto import frontend_pb2 as fe_pb
    from common.proto import frontend_pb2_grpc as fe_grpc
    from common.rpc import sync_channel

    deadline = time.monotonic() + timeout_s
    for rec in stamp.front_ends():
        if not stamp.alive(rec.name):
            continue
        with sync_channel(rec.address, 4 * 1024 * 1024) as channel:
            stub = fe_grpc.FrontEndStub(channel)
            while True:
                try:
                    stub.Status(fe_pb.FrontEndStatusRequest(), timeout=1.0)
                    break
                except grpc.RpcError as exc:
                    if time.monotonic() > deadline:
                        raise Unavailable(f"{rec.name} did not answer within "
                                          f"{timeout_s:g}s: {exc.code()}") from None
                    time.sleep(0.05)


def ensure_admin_account(stamp: LocalStamp, name: str, path: Path) -> str:
    """Create account `name` unless it exists (then keep its keys), write its connection
    string naming every front end to `path` (mode 0600, durably), and return it."""
    from stampsdk import connection_string

    from common.clock import SystemClock
    from common.errors import AlreadyExists
    from frontend.accounts import AccountStore
    from lock_service.client import LockClient

    with LockClient([r.address for r in stamp.lock_servers()], holder="stamp-up") as locks:
        store = AccountStore(locks, SystemClock())
        try:
            account = store.create(name)
        except AlreadyExists:
            account = store.get(name)
    text = connection_string.make([r.address for r in stamp.front_ends()], name,
                                  key=account.keys[0], tls=stamp.tls,
                                  ca_file=local_tls.ca_file(stamp)).format()
    tmp = path.with_name(path.name + ".tmp")
    # The key is never readable by others, not even for a moment: the temporary file is
    # made 0600 before the key is written into it (replace_file keeps its mode).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    os.close(fd)
    durable_fs.replace_file(path, (text + "\n").encode(), tmp)
    return text
