"""The Raft port's door (§9): only peers that hold the stamp secret get in, and a stranger
costs a replica little while it is turned away.

pysyncobj 0.3.17 unpickles every message it reads. With a `password` (the stamp secret,
common/stamp_secret.py) it seals each message with its connection's `encryptor`, and a
TcpConnection authenticates each (`extract_timestamp`, then `decrypt`) before
`pickle.loads`, on every message of every connection, its first ones (the random-key
exchange, the peer's address) included; a message that fails closes the connection. So no
byte of a stranger's reaches pickle: `AuthenticatedTransport` refuses to run without a
secret. pysyncobj's own encryptor is Fernet; the transport replaces it with `RaftSeal`
(common/raft_seal.py: AES-GCM, the same guarantees for a tenth of Fernet's CPU per message,
issue 29) before it makes any connection. Its connections send small messages as stored
zlib streams, not deflated (`compress`): deflating them cost more than sealing them.

What the password leaves open, closed here, on a connection a peer opened and that has not
yet named itself (pysyncobj's `_unknownConnections`: every byte on it so far unauthenticated):
- pysyncobj buffers as many bytes as a frame's 4-byte length claims (up to 2 GiB), copying
  the whole buffer again on every read, on the tick thread: a stranger streaming junk held
  memory and stalled the leader (a lock-service write took 1.5 s). Such a connection stops
  being read past `PREAUTH_BUFFER_BYTES_MAX` until what it sent is parsed, and is closed if
  that did not name the peer (a peer's first messages are a few hundred bytes).
- a connection that sends nothing is never timed out (pysyncobj checks its timeout only when
  the connection has an event): it must name itself within `PREAUTH_TIMEOUT_S`.
- pysyncobj drops a connection that fails authentication without a word: a replica given
  another secret than its peers' would just never join. Such closings are logged (rate
  limited: strangers choose how often), with the address they came from.
"""

from __future__ import annotations

import logging
import struct
import time
import zlib
from typing import Any

import pysyncobj.pickle as pysyncobj_pickle
from pysyncobj import SyncObj
from pysyncobj.monotonic import monotonic as raft_clock

from common.errors import InvalidArgument
from common.isolation_raft import IsolatingTransport
from common.raft_seal import RaftSeal

log = logging.getLogger(__name__)

PREAUTH_BUFFER_BYTES_MAX = 64 * 1024
PREAUTH_TIMEOUT_S = 5.0
# At most one warning about unauthenticated connections per this long (the count goes in it).
STRANGER_LOG_INTERVAL_S = 10.0
# pysyncobj deflates every message (zlib.compress(data, 3)): ~55 us of an idle replica's CPU
# per message, measured in place, to take ~70 bytes off a heartbeat of ~150 (issue 29). A
# message of at most STORED_BYTES_MAX bytes goes as a zlib stream of one stored (not
# deflated) block instead, ~13 us: pysyncobj's receiver decompresses it as any zlib stream.
STORED_BYTES_MAX = 4096
COMPRESS_LEVEL = 3  # pysyncobj's, for larger messages
ZLIB_HEADER = b"\x78\x01"  # RFC 1950: deflate, 32 KiB window, no dictionary; check bits
STORED_LAST_BLOCK = b"\x01"  # RFC 1951: the last block, stored; then LEN, NLEN, the bytes


class AuthenticatedTransport(IsolatingTransport):
    """pysyncobj's TCP transport that talks only to holders of the stamp secret (see the
    module docstring for what it guards beyond pysyncobj's password)."""

    def __init__(self, syncObj: SyncObj, selfNode: Any, otherNodes: Any) -> None:
        if syncObj.encryptor is None:
            # pysyncobj without a password unpickles whatever reaches the port.
            raise InvalidArgument("a Raft replica on TCP needs the stamp secret")
        # Here, not later: TCPTransport's constructor hands the encryptor to the outgoing
        # connections it makes (addNode), and each connection keeps the one it was given.
        syncObj._SyncObj__encryptor = RaftSeal(syncObj.conf.password)
        assert isinstance(syncObj.encryptor, RaftSeal), "pysyncobj moved its encryptor"
        # Incoming connections not yet named: when accepted, and where from.
        self._strangers: dict[Any, tuple[float, str]] = {}
        self._strangers_closed = 0
        self._strangers_logged_at = float("-inf")
        super().__init__(syncObj, selfNode, otherNodes)

    def addNode(self, node: Any) -> None:
        super().addNode(node)
        conn = self._connections.get(node)  # made if this replica dials the node
        if conn is not None:
            conn.send = lambda message: _send(conn, message)

    def _onNewIncomingConnection(self, conn: Any) -> None:
        super()._onNewIncomingConnection(conn)
        conn.send = lambda message: _send(conn, message)
        self._strangers[conn] = (time.monotonic(), _peer_of(conn))
        read = conn._TcpConnection__processRead

        def over() -> bool:
            return (conn in self._unknownConnections
                    and len(conn._TcpConnection__readBuffer) > PREAUTH_BUFFER_BYTES_MAX)

        def read_bounded() -> bool:
            # pysyncobj calls this in a loop until it returns False, then parses the buffer.
            if over():
                # Reading stopped here last time and what was parsed since did not name the
                # peer: its first frame is larger than a peer's first messages ever are.
                conn.disconnect()  # _onDisconnected counts it
                return False
            more: bool = read()
            # Stop reading past the bound, and let pysyncobj parse what it has: a peer may
            # send its address and, at once, a large append_entries behind it.
            return more and not over()

        conn._TcpConnection__processRead = read_bounded

    def _onDisconnected(self, conn: Any) -> None:
        stranger = self._strangers.pop(conn, None)
        if stranger is not None and conn in self._unknownConnections:
            self._stranger_closed(stranger[1])
        super()._onDisconnected(conn)

    def _onTick(self) -> None:
        now = time.monotonic()
        for conn, (accepted_at, _) in list(self._strangers.items()):
            if conn not in self._unknownConnections:
                del self._strangers[conn]  # it named itself: a peer (or gone)
            elif now - accepted_at > PREAUTH_TIMEOUT_S:
                conn.disconnect()
        super()._onTick()

    def _stranger_closed(self, peer: str) -> None:
        self._strangers_closed += 1
        now = time.monotonic()
        if now - self._strangers_logged_at >= STRANGER_LOG_INTERVAL_S:
            log.warning("closed %d Raft connection(s) that did not authenticate, the last "
                        "from %s: a stranger, or a peer with another stamp secret",
                        self._strangers_closed, peer)
            self._strangers_closed = 0
            self._strangers_logged_at = now


def _peer_of(conn: Any) -> str:
    sock = conn._TcpConnection__socket
    try:
        host, port = sock.getpeername()[:2]
    except (AttributeError, OSError):
        return "an unknown address"
    return f"{host}:{port}"


def compress(data: bytes) -> bytes:
    """`data` as a zlib stream: stored if small (see STORED_BYTES_MAX), else deflated."""
    size = len(data)
    if size > STORED_BYTES_MAX:
        return zlib.compress(data, COMPRESS_LEVEL)
    return b"".join((ZLIB_HEADER, STORED_LAST_BLOCK, struct.pack("<HH", size, size ^ 0xFFFF),
                     data, struct.pack(">I", zlib.adler32(data))))


def _send(conn: Any, message: Any) -> None:
    """pysyncobj 0.3.17's TcpConnection.send, line for line, but for `compress`."""
    if conn.sendRandKey:
        message = (conn.sendRandKey, message)
    data = compress(pysyncobj_pickle.dumps(message))
    if conn.encryptor:
        data = conn.encryptor.encrypt_at_time(data, int(raft_clock()))
    conn._TcpConnection__writeBuffer += struct.pack("i", len(data)) + data
    conn._TcpConnection__trySendBuffer()
