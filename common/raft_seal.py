"""The seal on every Raft message (§9): AES-256-GCM under a key derived from the stamp secret,
in place of pysyncobj's Fernet (issue 29: Fernet was ~30% of an idle follower's tick thread).

Contract (what pysyncobj's TcpConnection asks of its `encryptor`, and what `RaftSeal` keeps):
- `encrypt_at_time(data, timestamp)` returns a token that carries `data`, confidential, and
  `timestamp`, in the clear; both authenticated under the stamp secret.
- `extract_timestamp(token)` AUTHENTICATES the whole token before it returns the timestamp,
  and raises `Unauthenticated` if any byte of it is not as sealed by a holder of the secret.
  pysyncobj calls it first and refuses a timestamp older than the connection's last one
  (`recvLastTimestamp`), then calls `decrypt` on the same token.
- `decrypt(token)` returns the data, or raises `Unauthenticated` as `extract_timestamp` does.
  No byte that did not authenticate is ever returned, so none reaches pickle.

Threat model: anyone can reach a Raft port and send, replay, reorder or alter bytes on a
connection; only holders of the stamp secret can seal (common/stamp_secret.py makes it from
32 random bytes: it needs no password stretching, on which Fernet's key spent 100,000
rounds). The seal gives what Fernet gave: integrity and authenticity of each message,
confidentiality of its content, and an authenticated timestamp (the sender's monotonic
clock, whole seconds) with which pysyncobj refuses, on one connection, a message older than
the last; a message replayed from another connection is refused by pysyncobj's
per-connection random keys, sealed inside every message. Left open, as with Fernet: a
message replayed on its own connection while the last one received there has the same
timestamp (within that second), and the length and timing of messages.

Token (every byte of the header is associated data, so authenticated):
    version (1) | salt (16) | nonce (12) | timestamp (8, signed big-endian) | ciphertext | tag (16)
The key of a token is HKDF-SHA256(secret, salt, KEY_INFO): KEY_INFO is this seal's own label,
so the key is never one that anything else derives from the secret. A sender draws a random
salt when it starts and again every `MESSAGES_PER_SALT_MAX` messages (an "epoch"), and numbers
its messages in the epoch: the nonce is that counter, so a (key, nonce) pair is never used
twice unless two epochs draw the same 128-bit salt (2^-128 for any two epochs).
GCM's nonce reuse would give away the authentication key; a fresh key per epoch also keeps
the data sealed under one key far below GCM's bounds however long a stamp lives.
A receiver derives the key of each salt it meets and keeps the last `KEYS_CACHED_MAX` (each
peer of a group has one live salt); a salt beyond the cache is derived again, as derivation
is deterministic: an old salt still authenticates, since replay protection is pysyncobj's
timestamp and per-connection keys, never the salt. A key is cached only once a token
authenticated under it, so strangers sending random salts cannot push out a peer's key.

Every replica of a group must seal this way (this VERSION): a group does not mix versions,
since a stamp restarts whole (common/stamp_secret.py, Rotation). A token of another version,
a Fernet one included, is refused.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from common.errors import InvalidArgument, Unauthenticated

VERSION = 1
SALT_BYTES = 16
NONCE_BYTES = 12
KEY_BYTES = 32  # AES-256
TAG_BYTES = 16
HEADER = struct.Struct(f">B{SALT_BYTES}s{NONCE_BYTES}sq")  # version, salt, nonce, timestamp
TOKEN_BYTES_MIN = HEADER.size + TAG_BYTES
# This seal's own HKDF label: no other key derived from the stamp secret can equal its keys.
KEY_INFO = b"stamp raft seal v1: AES-256-GCM message key"
# Messages a sender seals under one key before it draws a new salt.
MESSAGES_PER_SALT_MAX = 2**24
# Keys of peers' salts a receiver keeps (a group of 3 has 2 live ones per replica).
KEYS_CACHED_MAX = 16


def derive_key(secret: bytes, salt: bytes) -> AESGCM:
    """The AEAD of one epoch's salt (deterministic: sender and receivers derive the same)."""
    assert len(salt) == SALT_BYTES
    hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=salt, info=KEY_INFO)
    return AESGCM(hkdf.derive(secret))


def _as_bytes(secret: bytes | str) -> bytes:
    # pysyncobj takes a str password too (and encodes it so); the stamp gives bytes.
    return secret if isinstance(secret, bytes) else secret.encode()


class RaftSeal:
    """pysyncobj's `encryptor`, sealing with AES-GCM (see the module docstring). One per
    replica, shared by all its connections; thread-safe, though pysyncobj calls it from its
    tick thread only."""

    def __init__(self, secret: bytes | str, *,
                 random_bytes: Callable[[int], bytes] = os.urandom,
                 messages_per_salt: int = MESSAGES_PER_SALT_MAX) -> None:
        self._secret = _as_bytes(secret)
        if not self._secret:
            raise InvalidArgument("a Raft seal needs the stamp secret")
        assert 0 < messages_per_salt <= 2 ** (8 * NONCE_BYTES)
        self._random_bytes = random_bytes
        self._messages_per_salt = messages_per_salt
        self._send_lock = threading.Lock()
        self._salt = b""
        self._sealer: AESGCM | None = None
        self._sent = messages_per_salt  # no epoch yet: the first seal starts one
        self._keys: dict[bytes, AESGCM] = {}
        # The last token extract_timestamp authenticated, with what it held, for the
        # decrypt pysyncobj calls right after on the same token (one AEAD pass, not two).
        self._opened: tuple[bytes, bytes] | None = None

    # --- pysyncobj's encryptor interface ------------------------------------------------------

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        with self._send_lock:
            if self._sent >= self._messages_per_salt:
                self._new_epoch()
            counter, self._sent = self._sent, self._sent + 1
            salt, sealer = self._salt, self._sealer
        assert sealer is not None
        nonce = counter.to_bytes(NONCE_BYTES, "big")
        header = HEADER.pack(VERSION, salt, nonce, int(current_time))
        return header + sealer.encrypt(nonce, data, header)

    def extract_timestamp(self, token: bytes) -> int:
        timestamp, data = self._open(token)
        if type(token) is bytes:  # immutable: what decrypt is handed next cannot differ
            self._opened = (token, data)
        return timestamp

    def decrypt(self, token: bytes) -> bytes:
        opened = self._opened
        if opened is not None and opened[0] is token:
            # The very object extract_timestamp authenticated (kept alive by `_opened`, so
            # its identity cannot have passed to another object).
            self._opened = None
            return opened[1]
        return self._open(token)[1]

    # --- inside ---------------------------------------------------------------------------------

    def _new_epoch(self) -> None:
        """A fresh salt, hence a fresh key, and the nonce counter back at 0 (send lock held)."""
        salt = self._random_bytes(SALT_BYTES)
        self._salt, self._sealer, self._sent = salt, derive_key(self._secret, salt), 0

    def _open(self, token: bytes) -> tuple[int, bytes]:
        """(timestamp, data) of an authentic token; Unauthenticated otherwise."""
        if len(token) < TOKEN_BYTES_MIN or token[0] != VERSION:
            raise Unauthenticated("not a Raft seal of this version")
        _, salt, nonce, timestamp = HEADER.unpack_from(token)
        key = self._keys.get(salt)
        opener = key if key is not None else derive_key(self._secret, salt)
        view = memoryview(token)
        try:
            data = opener.decrypt(nonce, view[HEADER.size:], view[:HEADER.size])
        except InvalidTag:
            raise Unauthenticated("a Raft message failed authentication") from None
        if key is None:
            self._remember(salt, opener)
        return timestamp, data

    def _remember(self, salt: bytes, key: AESGCM) -> None:
        """Cache an authenticated salt's key, dropping the oldest past KEYS_CACHED_MAX."""
        while len(self._keys) >= KEYS_CACHED_MAX:
            self._keys.pop(next(iter(self._keys)), None)
        self._keys[salt] = key
