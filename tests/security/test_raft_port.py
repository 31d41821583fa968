"""Issue 28, item 1: a Raft port (lock service, stream manager) runs no pickle a stranger sends.

pysyncobj frames every message as a 4-byte length and zlib(pickle(message)) and unpickles
it on arrival. Against a real stamp (3 lock replicas, 1 stream manager, no extent node), a
pickle whose unpickling creates a marker file is sent to each Raft port, framed exactly so:
from the configured address, from another local source address (127.0.0.2), and sealed
with a secret that is not the stamp's; and the port is tried on another local address
(127.0.0.2:PORT). The marker never appears, and both groups still serve afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import secrets
import socket
import stat
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import process, raft_auth, stamp_secret
from common.raft_seal import RaftSeal
from lock_service import main as lock_main
from lock_service.client import LockClient
from stream_layer.sm_client import AsyncStreamManagerClient
from stream_layer.stream_manager import main as sm_main
from tests.conftest import check_raft_logs, stamp_config
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

OTHER_LOCAL_HOST = "127.0.0.2"
CLOSE_TIMEOUT_S = 10.0
FLOOD_BYTES = 8 * 2**20  # past what loopback socket buffers take in before a reset
FLOOD_CHUNK_BYTES = 64 * 1024
SERVE_TIMEOUT_S = 20.0


class _Touch:
    """Unpickling it opens (creates) `path`: code run by whoever unpickles it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return open, (str(self.path), "a")


def _frame(payload: bytes) -> bytes:
    """A message as pysyncobj's TcpConnection frames it (native-order int length)."""
    return struct.pack("i", len(payload)) + payload


def _crafted(marker: Path) -> bytes:
    return zlib.compress(pickle.dumps(_Touch(marker), protocol=2), 3)


def _send_until_closed(host: str, port: int, payload: bytes, source: str | None = None) -> None:
    """Connect (from `source` if given), send one framed message, and wait until the server
    closes the connection: by then it has read the message and done all it will do with it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if source is not None:
            sock.bind((source, 0))
        sock.settimeout(CLOSE_TIMEOUT_S)
        sock.connect((host, port))
        sock.sendall(_frame(payload))
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while sock.recv(4096):  # a server's own first message is read and ignored
            assert time.monotonic() < deadline, "the Raft port never closed the connection"


@pytest.fixture(scope="module")
def raft_stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    """The smallest stamp with both Raft groups: 3 lock replicas (a real group whose peers
    must authenticate each other), 1 stream manager, no extent node."""
    root = tmp_path_factory.mktemp("raft-port")
    stamp = LocalStamp(root / "stamp", stamp_config(0, stream_managers=1, lock_servers=3))
    try:
        stamp.up()
        yield stamp
    finally:
        stamp.kill_all()
    check_raft_logs(stamp.data_dir)


def _raft_addresses(stamp: LocalStamp) -> list[tuple[str, str, int]]:
    found = []
    for rec in [*stamp.lock_servers(), *stamp.stream_managers()]:
        host, _, port = rec.extra["raft_address"].rpartition(":")
        found.append((rec.name, host, int(port)))
    return found


def _lock_group_serves(stamp: LocalStamp, value: bytes) -> None:
    client = LockClient([r.address for r in stamp.lock_servers()], holder="test-raft-port",
                        call_timeout_s=SERVE_TIMEOUT_S)
    try:
        client.put("raft-port-probe", value)
        found = client.get("raft-port-probe")
        assert found is not None and found[0] == value
    finally:
        client.close()


def _stream_managers_serve(stamp: LocalStamp, pattern: str) -> None:
    async def write_and_read() -> None:
        client = AsyncStreamManagerClient([r.address for r in stamp.stream_managers()],
                                          stamp.config.stream_manager)
        try:
            await client.set_stream_policy(pattern, 6, 3, 60.0)
            assert pattern in {p.pattern for p in await client.list_stream_policies()}
        finally:
            await client.close()
    asyncio.run(write_and_read())


def test_a_crafted_pickle_sent_to_a_raft_port_runs_nothing(raft_stamp: LocalStamp,
                                                           tmp_path: Path) -> None:
    markers, accepted = [], []
    wrong_secret = RaftSeal(secrets.token_hex(32))
    for name, host, port in _raft_addresses(raft_stamp):
        # From the configured address, plain (as pysyncobj frames it without a password).
        marker = tmp_path / f"{name}-plain"
        _send_until_closed(host, port, _crafted(marker))
        markers.append(marker)
        # From another local source address.
        marker = tmp_path / f"{name}-from-other-source"
        _send_until_closed(host, port, _crafted(marker), source=OTHER_LOCAL_HOST)
        markers.append(marker)
        # Sealed as the replicas seal (common/raft_seal.py), but with a secret not the stamp's.
        marker = tmp_path / f"{name}-wrong-secret"
        _send_until_closed(host, port, wrong_secret.encrypt_at_time(
            _crafted(marker), int(time.monotonic())))
        markers.append(marker)
        # The port on another local address: nothing listens there.
        marker = tmp_path / f"{name}-other-address"
        markers.append(marker)
        try:
            _send_until_closed(OTHER_LOCAL_HOST, port, _crafted(marker))
            accepted.append(name)
        except ConnectionRefusedError:
            pass

    assert [m.name for m in markers if m.exists()] == []
    assert accepted == [], f"Raft ports listening on {OTHER_LOCAL_HOST}"
    _lock_group_serves(raft_stamp, b"still serving")
    _stream_managers_serve(raft_stamp, "raft-port-probe-*")
    for rec in [*raft_stamp.lock_servers(), *raft_stamp.stream_managers()]:
        # pysyncobj closes such connections without a word; a replica says so (a peer
        # given another secret would otherwise just never join).
        assert "did not authenticate" in (Path(rec.dir) / "server.log").read_text(), rec.name


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed `sock` within its timeout (anything it sends is read)."""
    try:
        while sock.recv(4096):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def test_a_stranger_holds_little_of_a_raft_port_and_not_for_long(raft_stamp: LocalStamp) -> None:
    """Before authenticating, a connection is read no further than a peer's first messages
    need (pysyncobj buffered whatever a frame's length claimed, up to 2 GiB, re-copying it
    on every read on the tick thread), and one that never speaks is closed."""
    with contextlib.ExitStack() as stack:
        silent = {}
        for name, host, port in _raft_addresses(raft_stamp):  # all at once: one wait
            silent[name] = stack.enter_context(socket.create_connection((host, port)))
            silent[name].settimeout(raft_auth.PREAUTH_TIMEOUT_S + CLOSE_TIMEOUT_S)
        for name, host, port in _raft_addresses(raft_stamp):
            flood = stack.enter_context(socket.create_connection((host, port)))
            flood.settimeout(CLOSE_TIMEOUT_S)
            sent = 0
            with contextlib.suppress(ConnectionResetError, BrokenPipeError):
                flood.sendall(struct.pack("i", 2**31 - 1))  # a frame of 2 GiB, it says
                while sent < FLOOD_BYTES:
                    flood.sendall(bytes(FLOOD_CHUNK_BYTES))
                    sent += FLOOD_CHUNK_BYTES
            assert _closed(flood), f"{name} kept reading a stranger's junk ({sent} bytes sent)"
        for name, sock in silent.items():
            assert _closed(sock), f"{name} kept a silent stranger's connection open"
    _lock_group_serves(raft_stamp, b"serving after strangers")


def test_the_secret_is_private_and_in_no_record_argv_or_log(raft_stamp: LocalStamp) -> None:
    path = raft_stamp.data_dir / stamp_secret.SECRET_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    secret = stamp_secret.read(path)
    assert len(secret) >= stamp_secret.SECRET_CHARS_MIN
    text = secret.decode()
    assert text not in (raft_stamp.data_dir / "stamp.json").read_text()
    logs = sorted(raft_stamp.data_dir.glob("*/server.log"))
    assert len(logs) == 4
    for log in logs:
        assert text not in log.read_text(errors="replace"), log
    for rec in [*raft_stamp.lock_servers(), *raft_stamp.stream_managers()]:
        argv = Path(f"/proc/{rec.pid}/cmdline").read_bytes().split(b"\0")
        assert str(path).encode() in argv and secret not in b" ".join(argv), rec.name
    assert os.access(path, os.R_OK)


REPLICA_COMMANDS = {
    "lock": ["-m", "lock_service.main", "--name", "lock-9", "--raft-port", "{raft}"],
    "stream-manager": ["-m", "stream_layer.stream_manager.main", "--name", "sm-9", "--port",
                       "0", "--raft-port", "{raft}", "--peers", "127.0.0.1:{raft}=127.0.0.1:1"],
}
REFUSAL_TIMEOUT_S = 30.0


def _run_replica(kind: str, directory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Start one replica process that should refuse to run; it must end by itself."""
    raft = str(process.free_port())
    args = [a.format(raft=raft) for a in REPLICA_COMMANDS[kind]]
    return subprocess.run([sys.executable, *args, "--dir", str(directory), *extra],
                          capture_output=True, text=True, timeout=REFUSAL_TIMEOUT_S,
                          cwd=Path(__file__).parents[2])


@pytest.mark.parametrize("kind", sorted(REPLICA_COMMANDS))
def test_a_replica_without_a_private_secret_refuses_to_start(
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Never unauthenticated: without --secret-file the command line is refused; with a
    secret other users may read, the process ends at once with one clear line (no
    traceback), the secret in no message."""
    parse = {"lock": lock_main.parse_args, "stream-manager": sm_main.parser().parse_args}[kind]
    args = [a.format(raft="7000") for a in REPLICA_COMMANDS[kind][2:]]
    with pytest.raises(SystemExit) as refused:
        parse([*args, "--dir", str(tmp_path / "a")])
    assert refused.value.code == 2 and "--secret-file" in capsys.readouterr().err

    secret = tmp_path / "stamp-secret"
    stamp_secret.make(secret)
    text = stamp_secret.read(secret).decode()
    secret.chmod(0o644)
    shared = _run_replica(kind, tmp_path / "b", "--secret-file", str(secret))
    assert shared.returncode == 1 and "Traceback" not in shared.stderr
    assert "open to other users (mode 0644)" in shared.stderr.splitlines()[-1]
    assert text not in shared.stderr


def test_a_stamp_recorded_before_it_had_a_secret_gets_one_on_its_next_up(
        raft_stamp: LocalStamp) -> None:
    """Last in this module (it restarts the module's stamp): stamp.json from before issue
    28 (no --secret-file) and no secret file; `up` makes one and the groups serve."""
    raft_stamp.down()
    old = LocalStamp.load(raft_stamp.data_dir)
    for rec in old.records.values():
        if stamp_secret.SECRET_ARG in rec.argv:
            at = rec.argv.index(stamp_secret.SECRET_ARG)
            del rec.argv[at:at + 2]
    old.save()
    stamp_secret.path_in(old.data_dir).unlink()

    again = LocalStamp(raft_stamp.data_dir, raft_stamp.config)  # its shape is in no file
    again.records = LocalStamp.load(raft_stamp.data_dir).records
    try:
        again.up()
        secret = stamp_secret.path_in(again.data_dir)
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert all(rec.argv[rec.argv.index(stamp_secret.SECRET_ARG) + 1] == str(secret)
                   for rec in [*again.lock_servers(), *again.stream_managers()])
        _lock_group_serves(again, b"after the secret was made")
        _stream_managers_serve(again, "raft-port-probe-again-*")
    finally:
        again.kill_all()
