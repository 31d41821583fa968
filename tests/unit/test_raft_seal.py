"""The Raft seal (common/raft_seal.py, issue 29): AES-GCM in place of pysyncobj's Fernet.
Round trips, every flipped bit refused, another secret refused, salt epochs and the bounded
key cache, and, through pysyncobj's real TcpConnection, replays of an older timestamp and
tampered frames refused before anything is unpickled; every TCP replica carries the seal on
every connection it makes."""

from __future__ import annotations

import itertools
import pickle
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from pysyncobj.poller import createPoller
from pysyncobj.tcp_connection import CONNECTION_STATE, TcpConnection
from pysyncobj.tcp_server import TcpServer

from common import raft_seal
from common.errors import InvalidArgument, Unauthenticated
from common.process import free_port
from common.raft import DurableReplica
from common.raft_seal import HEADER, KEYS_CACHED_MAX, SALT_BYTES, RaftSeal

SECRET = b"a stamp secret of the seal's tests, 32 characters or more"
OTHER_SECRET = b"another stamp secret, also 32 characters or more"
WAIT_S = 5.0


def counting_salts() -> Callable[[int], bytes]:
    """Salts 0, 1, 2, ... (distinct and predictable, instead of os.urandom)."""
    counter = itertools.count()
    return lambda n: next(counter).to_bytes(n, "big")


def refused(seal: RaftSeal, token: bytes) -> bool:
    """Whether both of pysyncobj's calls refuse `token` (each on its own)."""
    outcomes = []
    for call in (seal.extract_timestamp, seal.decrypt):
        try:
            call(token)
            outcomes.append(False)
        except Unauthenticated:
            outcomes.append(True)
    return all(outcomes)


# --- the seal itself --------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 150, 70_000])
def test_a_sealed_message_opens_with_its_timestamp(size: int) -> None:
    sender, receiver = RaftSeal(SECRET), RaftSeal(SECRET)
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    for timestamp in (0, 1, 86_400, 2**40):
        token = sender.encrypt_at_time(data, timestamp)
        assert receiver.extract_timestamp(token) == timestamp
        assert receiver.decrypt(token) == data
        assert RaftSeal(SECRET).decrypt(token) == data  # decrypt alone authenticates too


def test_an_empty_secret_is_refused() -> None:
    for secret in (b"", ""):
        with pytest.raises(InvalidArgument, match="needs the stamp secret"):
            RaftSeal(secret)


def test_a_str_secret_seals_as_its_encoding() -> None:
    # pysyncobj accepts a str password; the stamp hands bytes.
    token = RaftSeal(SECRET.decode()).encrypt_at_time(b"x", 3)
    assert RaftSeal(SECRET).decrypt(token) == b"x"


def test_every_flipped_bit_is_refused() -> None:
    token = RaftSeal(SECRET).encrypt_at_time(b"a small raft message", 1234)
    receiver = RaftSeal(SECRET)
    for at, bit in itertools.product(range(len(token)), range(8)):
        tampered = bytearray(token)
        tampered[at] ^= 1 << bit
        assert refused(receiver, bytes(tampered)), f"byte {at} bit {bit}"
    assert receiver.decrypt(token) == b"a small raft message"  # the receiver is unharmed


def test_cut_lengthened_and_empty_tokens_are_refused() -> None:
    token = RaftSeal(SECRET).encrypt_at_time(b"message", 7)
    receiver = RaftSeal(SECRET)
    for cut in range(len(token)):
        assert refused(receiver, token[:cut]), cut
    assert refused(receiver, token + b"\0")


def test_another_secret_or_a_fernet_token_is_refused() -> None:
    receiver = RaftSeal(SECRET)
    assert refused(receiver, RaftSeal(OTHER_SECRET).encrypt_at_time(b"message", 7))
    # What pysyncobj would send with its own Fernet seal, even one keyed by the secret.
    fernet = Fernet(Fernet.generate_key())
    assert refused(receiver, fernet.encrypt_at_time(b"message", 7))


def test_decrypt_returns_what_was_authenticated_never_a_changed_token() -> None:
    sender, receiver = RaftSeal(SECRET), RaftSeal(SECRET)
    first = sender.encrypt_at_time(b"first", 1)
    second = sender.encrypt_at_time(b"second", 1)
    assert receiver.extract_timestamp(first) == 1
    assert receiver.decrypt(second) == b"second"  # not the one remembered
    tampered = bytearray(first)
    tampered[-1] ^= 1
    assert receiver.extract_timestamp(first) == 1
    with pytest.raises(Unauthenticated):
        receiver.decrypt(bytes(tampered))  # equal length, another object: opened afresh
    # A mutable token may change between the two calls: it is never remembered.
    mutable = bytearray(first)
    assert receiver.extract_timestamp(mutable) == 1  # type: ignore[arg-type]
    mutable[-1] ^= 1
    with pytest.raises(Unauthenticated):
        receiver.decrypt(mutable)  # type: ignore[arg-type]


def test_nonces_never_repeat_and_a_new_salt_comes_every_epoch() -> None:
    sender = RaftSeal(SECRET, random_bytes=counting_salts(), messages_per_salt=3)
    receiver = RaftSeal(SECRET)
    headers = []
    for n in range(10):
        token = sender.encrypt_at_time(f"message {n}".encode(), n)
        headers.append(HEADER.unpack_from(token))
        assert receiver.extract_timestamp(token) == n
        assert receiver.decrypt(token) == f"message {n}".encode()
    salts = [int.from_bytes(salt, "big") for _, salt, _, _ in headers]
    nonces = [int.from_bytes(nonce, "big") for _, _, nonce, _ in headers]
    assert salts == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    assert nonces == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    assert len({(s, n) for s, n in zip(salts, nonces, strict=True)}) == 10


def test_a_salt_past_the_key_cache_still_authenticates_and_the_cache_stays_bounded() -> None:
    """Derivation is deterministic: a receiver that dropped an old salt's key derives it
    again. Replays are pysyncobj's to refuse (timestamps, per-connection keys), not the
    salt's."""
    sender = RaftSeal(SECRET, random_bytes=counting_salts(), messages_per_salt=1)
    receiver = RaftSeal(SECRET)
    tokens = [sender.encrypt_at_time(f"epoch {n}".encode(), n)
              for n in range(KEYS_CACHED_MAX + 5)]
    for token in tokens:
        receiver.decrypt(token)
        assert len(receiver._keys) <= KEYS_CACHED_MAX
    oldest_salt = HEADER.unpack_from(tokens[0])[1]
    assert oldest_salt not in receiver._keys
    assert receiver.extract_timestamp(tokens[0]) == 0
    assert receiver.decrypt(tokens[0]) == b"epoch 0"


def test_a_strangers_salts_take_no_place_in_the_key_cache() -> None:
    receiver = RaftSeal(SECRET)
    peer = RaftSeal(SECRET).encrypt_at_time(b"peer", 1)
    receiver.decrypt(peer)
    cached = dict(receiver._keys)
    stranger = RaftSeal(OTHER_SECRET, random_bytes=counting_salts(), messages_per_salt=1)
    for n in range(KEYS_CACHED_MAX * 2):
        assert refused(receiver, stranger.encrypt_at_time(b"junk", n))
    assert receiver._keys == cached


def test_keys_are_the_seals_own() -> None:
    """HKDF with the seal's own label: not the secret itself, nor pysyncobj's Fernet key."""
    salt = bytes(SALT_BYTES)
    assert raft_seal.KEY_INFO.startswith(b"stamp raft seal")
    key = raft_seal.derive_key(SECRET, salt)
    token = RaftSeal(SECRET, random_bytes=lambda n: salt).encrypt_at_time(b"m", 1)
    _, _, nonce, _ = HEADER.unpack_from(token)
    assert key.decrypt(nonce, token[HEADER.size:], token[:HEADER.size]) == b"m"


# --- through pysyncobj's TcpConnection ------------------------------------------------------


class Receiver:
    """A pysyncobj TcpServer whose connections open with a RaftSeal, polled by the test."""

    def __init__(self) -> None:
        self.poller = createPoller("auto")
        self.port = free_port()
        self.messages: list[Any] = []
        self.connections: list[TcpConnection] = []
        self.server = TcpServer(self.poller, "127.0.0.1", self.port, self._accepted)
        self.server.bind()

    def _accepted(self, conn: TcpConnection) -> None:
        conn.encryptor = RaftSeal(SECRET)
        conn.setOnMessageReceivedCallback(self.messages.append)
        self.connections.append(conn)

    def poll_until(self, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            self.poller.poll(0.01)

    def close(self) -> None:
        for conn in self.connections:
            conn.disconnect()
        self.server.unbind()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()


def frame(seal: RaftSeal | Fernet, message: Any, timestamp: int) -> bytes:
    """A message as pysyncobj's TcpConnection.send frames it, sealed at `timestamp`."""
    token = seal.encrypt_at_time(zlib.compress(pickle.dumps(message), 3), timestamp)
    return struct.pack("i", len(token)) + token


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(WAIT_S)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_tcp_connection_pair_speaks_through_the_seal(receiver: Receiver) -> None:
    sender = TcpConnection(receiver.poller)
    sender.encryptor = RaftSeal(SECRET)
    assert sender.connect("127.0.0.1", receiver.port)
    receiver.poll_until(lambda: sender.state == CONNECTION_STATE.CONNECTED)
    try:
        messages = [{"type": "append_entries", "term": n} for n in range(5)]
        for message in messages:
            sender.send(message)
        receiver.poll_until(lambda: len(receiver.messages) == len(messages))
        assert receiver.messages == messages
    finally:
        sender.disconnect()


def test_an_older_timestamp_on_a_connection_is_refused(receiver: Receiver) -> None:
    """pysyncobj's replay check (`recvLastTimestamp`) works on the seal's timestamps: equal
    goes, older closes the connection, and nothing of it is delivered."""
    seal = RaftSeal(SECRET)
    with socket.create_connection(("127.0.0.1", receiver.port)) as sock:
        sock.sendall(frame(seal, "at 200", 200) + frame(seal, "at 200 again", 200))
        receiver.poll_until(lambda: len(receiver.messages) == 2)
        replay = frame(seal, "at 100", 100)
        sock.sendall(replay)
        receiver.poll_until(lambda: receiver.connections[0].state
                            == CONNECTION_STATE.DISCONNECTED)
        assert closed_by_peer(sock)
    assert receiver.messages == ["at 200", "at 200 again"]


@pytest.mark.parametrize("sealed_by", ["another secret", "a flipped bit", "fernet"])
def test_a_frame_that_does_not_authenticate_closes_the_connection_unread(
        receiver: Receiver, sealed_by: str) -> None:
    good = frame(RaftSeal(SECRET), "first", 5)
    if sealed_by == "another secret":
        bad = frame(RaftSeal(OTHER_SECRET), "forged", 5)
    elif sealed_by == "fernet":
        bad = frame(Fernet(Fernet.generate_key()), "forged", 5)
    else:
        flipped = bytearray(frame(RaftSeal(SECRET), "forged", 5))
        flipped[-20] ^= 0x10
        bad = bytes(flipped)
    with socket.create_connection(("127.0.0.1", receiver.port)) as sock:
        sock.sendall(good + bad)
        receiver.poll_until(lambda: bool(receiver.connections) and receiver.connections[0].state
                            == CONNECTION_STATE.DISCONNECTED)
        assert closed_by_peer(sock)
    assert receiver.messages == ["first"]


# --- on a replica ---------------------------------------------------------------------------


class Idle(DurableReplica):
    def snapshot_state(self) -> bytes:
        return b""

    def restore_state(self, blob: bytes) -> None:
        pass


def test_a_tcp_replica_seals_every_connection_with_the_seal(tmp_path: Path) -> None:
    """The seal is in place before the transport makes its first connection: pysyncobj's
    Fernet never reaches one, outgoing (made in the transport's constructor) or incoming."""
    ports = sorted(free_port() for _ in range(3))
    me, *peers = [f"127.0.0.1:{p}" for p in reversed(ports)]  # the highest dials the others
    replica = Idle(me, [me, *peers], tmp_path / "r", secret=SECRET)
    try:
        seal = replica.encryptor
        assert isinstance(seal, RaftSeal)
        outgoing = list(replica._SyncObj__transport._connections.values())
        assert len(outgoing) == 2
        assert all(conn.encryptor is seal for conn in outgoing)
        host, port = me.rsplit(":", 1)
        with socket.create_connection((host, int(port))) as sock:
            # A frame sealed with the secret by this seal's format is answered (the
            # transport's random-key exchange), so the incoming side opens it too.
            sock.sendall(frame(RaftSeal(SECRET), b"k" * 32, int(time.monotonic())))
            sock.settimeout(WAIT_S)
            length = struct.unpack("i", sock.recv(4))[0]
            answer = b""
            while len(answer) < length:
                answer += sock.recv(length - len(answer))
            echoed, _ = pickle.loads(zlib.decompress(RaftSeal(SECRET).decrypt(answer)))
            assert echoed == b"k" * 32
    finally:
        replica.close()
