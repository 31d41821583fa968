"""What a Raft replica's connections send (common/raft_auth.py, issue 29): small messages as
stored (not deflated) zlib streams, larger ones deflated as pysyncobj does; pysyncobj's
receiving side decompresses both as before; on the connections the replica dials and on
those it accepts."""

from __future__ import annotations

import pickle
import random
import socket
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.process import free_port
from common.raft import DurableReplica
from common.raft_auth import STORED_BYTES_MAX, compress
from common.raft_seal import RaftSeal

SECRET = b"a stamp secret of the transport's tests, 32 characters or more"
WAIT_S = 5.0


def stored(stream: bytes) -> bool:
    """Whether a zlib stream is one stored block (RFC 1951 BTYPE 00, the last)."""
    return stream[2] == 0x01


@pytest.mark.parametrize("size", [0, 1, 150, STORED_BYTES_MAX - 1, STORED_BYTES_MAX,
                                  STORED_BYTES_MAX + 1, 300_000])
def test_small_messages_go_stored_larger_ones_deflated_and_all_decompress(size: int) -> None:
    rng = random.Random(size)
    data = bytes(rng.choice(b"abcdefgh") for _ in range(size))
    stream = compress(data)
    assert zlib.decompress(stream) == data  # what pysyncobj's receiver does
    if size <= STORED_BYTES_MAX:
        assert stored(stream) and len(stream) == size + 11  # header, block head, adler32
    else:
        assert stream == zlib.compress(data, 3)  # pysyncobj's own


@given(st.binary(max_size=STORED_BYTES_MAX))
def test_a_stored_stream_is_read_back_whole_by_zlib(data: bytes) -> None:
    assert zlib.decompress(compress(data)) == data
    decompressor = zlib.decompressobj()  # and ends where it says it does
    assert decompressor.decompress(compress(data) + b"trailing") == data
    assert decompressor.eof and decompressor.unused_data == b"trailing"


# --- on a replica's connections ---------------------------------------------------------------


class Idle(DurableReplica):
    def snapshot_state(self) -> bytes:
        return b""

    def restore_state(self, blob: bytes) -> None:
        pass


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        got = b""
        while len(got) < n:
            more = sock.recv(n - len(got))
            assert more, "closed"
            got += more
        return got
    return exactly(struct.unpack("i", exactly(4))[0])


@pytest.fixture
def peer() -> Iterator[socket.socket]:
    """A listening socket standing for a peer that the replica dials."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(WAIT_S)
        yield listener


def test_a_replica_sends_stored_streams_on_connections_it_dials_and_accepts(
        tmp_path: Path, peer: socket.socket) -> None:
    peer_address = f"127.0.0.1:{peer.getsockname()[1]}"
    me = peer_address
    while me <= peer_address:  # pysyncobj: the larger address dials the smaller
        me = f"127.0.0.1:{free_port()}"
    replica = Idle(me, [me, peer_address], tmp_path / "r", secret=SECRET)
    seal = RaftSeal(SECRET)
    try:
        dialed, _ = peer.accept()
        with dialed:
            dialed.settimeout(WAIT_S)
            stream = seal.decrypt(read_frame(dialed))  # the replica's random key, first
            assert stored(stream)
            assert len(pickle.loads(zlib.decompress(stream))) == 32
        host, port = me.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as accepted:
            token = seal.encrypt_at_time(zlib.compress(pickle.dumps(b"k" * 32), 3),
                                         int(time.monotonic()))
            accepted.sendall(struct.pack("i", len(token)) + token)
            stream = seal.decrypt(read_frame(accepted))  # (our key, its random key)
            assert stored(stream)
            echoed, key = pickle.loads(zlib.decompress(stream))
            assert echoed == b"k" * 32 and len(key) == 32
    finally:
        replica.close()
