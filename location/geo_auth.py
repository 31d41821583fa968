"""How the stamps of one location know each other (issue 30): each stamp's `geo/stamp` entry
in its own lock service, and the signature of what one stamp ships to another.

`geo/stamp` (JSON) holds the stamp's name in the location, the location servers' addresses
(stamp.location.v1.Location: where each account's stamps are) and the location's replication
secret (32 random bytes, the same at every stamp of the location; `stamp location up` writes
it, tools/local_location.py). A stamp without the entry is stand-alone: it ships nothing and
takes no replicated writes.

A ReplicateCall (common/proto/frontend.proto: one account's replicated operations from its
primary stamp to its secondary) is signed with HMAC-SHA256 under that secret over

    stamp-geo-v1
    SOURCE STAMP
    TARGET STAMP
    ACCOUNT
    EPOCH               the account's placement epoch, as the source knows it
    TIMESTAMP           whole milliseconds since the epoch
    SHA-256             of the call's requests, serialized one after the other

(no field holds a newline: stamp and account names cannot). A stamp's SyncReport to the
location (location/sync_report.py) is signed the same way, its target LOCATION, its account
and epoch empty and 0, its digest over its ranges. `verify` refuses a bad signature
and a timestamp more than CLOCK_SKEW_MAX_S off with Unauthenticated. A captured call replayed
within that window re-applies operations the secondary had: the shipper sends a name's next
operations only after these were applied, so a replay can set names back to a state they had
until their next operations arrive (an attacker inside the network, with no secret: noted in
SECURITY.md's threat model as the geo door's limit).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from common.errors import InvalidArgument, StampError, Unauthenticated
from common.proto import location_internal_pb2 as internal_pb

log = logging.getLogger(__name__)

LOCK_KEY = "geo/stamp"
SETTINGS_TTL_S = 5.0
SECRET_BYTES = 32
CLOCK_SKEW_MAX_S = 300.0


@dataclass(frozen=True)
class GeoSettings:
    """A stamp's place in its location (module docstring)."""

    stamp: str
    location: tuple[str, ...]
    secret: bytes

    def __post_init__(self) -> None:
        if len(self.secret) != SECRET_BYTES:
            raise InvalidArgument(f"a location's replication secret has {SECRET_BYTES} bytes")
        if not self.location:
            raise InvalidArgument("a stamp in a location knows the location's servers")

    def encode(self) -> bytes:
        return json.dumps({"stamp": self.stamp, "location": list(self.location),
                           "secret": base64.b64encode(self.secret).decode()},
                          sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> GeoSettings:
        record = json.loads(data)
        return cls(record["stamp"], tuple(record["location"]),
                   base64.b64decode(record["secret"], validate=True))

    def __repr__(self) -> str:  # never a secret in a log
        return f"GeoSettings(stamp={self.stamp!r}, location={self.location!r})"


class SettingsStore(Protocol):
    """The part of lock_service.client.LockClient these settings are kept with."""

    def get(self, key: str) -> tuple[bytes, int] | None: ...

    def put(self, key: str, value: bytes) -> Any: ...


def read_settings(locks: SettingsStore) -> GeoSettings | None:
    """This stamp's place in its location (None: stand-alone)."""
    found = locks.get(LOCK_KEY)
    return None if found is None else GeoSettings.decode(found[0])


def write_settings(locks: SettingsStore, settings: GeoSettings) -> None:
    locks.put(LOCK_KEY, settings.encode())


class SettingsCache:
    """This stamp's GeoSettings as `read` (blocking: `read_settings` on a lock client) gave
    them at most `ttl_s` ago, read on a thread; a failed read keeps the last answer. What a
    front end's geo door and a partition server's shippers ask, so that a stamp that joins a
    location needs no restart."""

    def __init__(self, read: Callable[[], GeoSettings | None], ttl_s: float = SETTINGS_TTL_S,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._ttl_s = ttl_s
        self._now = now
        self._value: GeoSettings | None = None
        self._read_at = -float("inf")

    async def __call__(self) -> GeoSettings | None:
        if self._now() - self._read_at > self._ttl_s:
            try:
                self._value = await asyncio.to_thread(self._read)
                self._read_at = self._now()
            except StampError as exc:
                log.warning("reading this stamp's location settings: %s", exc)
        return self._value


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def requests_digest(serialized: Iterable[bytes]) -> bytes:
    digest = hashlib.sha256()
    for data in serialized:
        digest.update(len(data).to_bytes(8, "little"))  # boundaries are part of it
        digest.update(data)
    return digest.digest()


REPORT_TARGET = "location"


def sign_report(secret: bytes, report: internal_pb.SyncReport) -> bytes:
    return sign(secret, report.stamp, REPORT_TARGET, "", 0, report.timestamp_ms,
                _ranges_digest(report))


def verify_report(secret: bytes, report: internal_pb.SyncReport, now_s: float) -> None:
    """Unauthenticated unless `report` is signed with the location's secret, in time."""
    verify(secret, report.signature, report.stamp, REPORT_TARGET, "", 0, report.timestamp_ms,
           _ranges_digest(report), now_s)


def _ranges_digest(report: internal_pb.SyncReport) -> bytes:
    return requests_digest(r.SerializeToString() for r in report.ranges)


def _canonical(source: str, target: str, account: str, epoch: int, timestamp_ms: int,
               digest: bytes) -> bytes:
    fields = ("stamp-geo-v1", source, target, account, str(epoch), str(timestamp_ms),
              digest.hex())
    if any("\n" in f for f in fields):
        raise InvalidArgument("a stamp or account name holds no newline")
    return "\n".join(fields).encode()


def sign(secret: bytes, source: str, target: str, account: str, epoch: int,
         timestamp_ms: int, digest: bytes) -> bytes:
    return hmac.new(secret, _canonical(source, target, account, epoch, timestamp_ms, digest),
                    hashlib.sha256).digest()


def verify(secret: bytes, signature: bytes, source: str, target: str, account: str,
           epoch: int, timestamp_ms: int, digest: bytes, now_s: float) -> None:
    """Unauthenticated unless `signature` is the location's over these fields and the
    timestamp is within CLOCK_SKEW_MAX_S of `now_s`."""
    expected = sign(secret, source, target, account, epoch, timestamp_ms, digest)
    if not hmac.compare_digest(expected, signature):
        raise Unauthenticated("a signed call's signature is not the location's")
    off_s = timestamp_ms / 1000 - now_s
    if abs(off_s) > CLOCK_SKEW_MAX_S:
        raise Unauthenticated(f"a signed call's timestamp is {off_s:+.0f} s off (at most "
                              f"{CLOCK_SKEW_MAX_S:.0f} s either way)")
