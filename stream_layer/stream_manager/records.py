"""The stream manager's records (§2 "Stream manager"): streams, extents and extent nodes as
immutable values, and the extent states as data — which transitions are legal (h11-style
transition table). state.py changes them only by replacing a record whole."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import Fenced

OPEN, SEALED, ERASURE_CODED, DELETED = "open", "sealed", "erasure_coded", "deleted"
# Extent states as data: which transitions are legal (h11-style transition table).
EXTENT_TRANSITIONS: dict[str, frozenset[str]] = {
    OPEN: frozenset({SEALED, DELETED}),
    SEALED: frozenset({ERASURE_CODED, DELETED}),
    ERASURE_CODED: frozenset({DELETED}),
    DELETED: frozenset(),
}
ALIVE, DEAD = "alive", "dead"
STREAM_NAME_BYTES_MAX = 1024
EXTENT_IDS_RESERVED_MAX = 10_000


@dataclass(frozen=True)
class Stream:
    name: str
    extents: tuple[int, ...] = ()
    # The fencing epoch of the stream's current writer (a lock-service fencing token): a
    # writer with a smaller epoch can no longer add extents (§4 partition load).
    writer_epoch: int = 0


@dataclass(frozen=True)
class Extent:
    extent_id: int
    replicas: tuple[str, ...]  # node names; replicas[0] is the primary
    state: str = OPEN
    sealed_length: int = 0
    fragments: tuple[str, ...] = ()  # erasure-coded: node per fragment, data then parity
    ec_k: int = 0
    ec_m: int = 0
    # Data fragment i holds bytes [ec_cuts[i], ec_cuts[i+1]) (stream_layer/ec/layout.py);
    # ec_crcs[i] is the CRC32C of fragment i, so a rebuilt fragment can be checked.
    ec_cuts: tuple[int, ...] = ()
    ec_crcs: tuple[int, ...] = ()
    sealed_at: float = 0.0  # unix seconds the seal was decided (0: unknown)


@dataclass(frozen=True)
class Node:
    name: str
    address: str
    fault_domain: str
    upgrade_domain: str
    capacity_bytes: int = 0
    state: str = ALIVE


@dataclass(frozen=True)
class StreamPolicy:
    """What the ec job does with the sealed extents of the streams `pattern` names."""

    pattern: str
    ec_k: int
    ec_m: int
    after_s: float


POLICY_PATTERN_BYTES_MAX = 1024
POLICIES_MAX = 256


def check_epoch(stream: Stream, epoch: int) -> None:
    if epoch < stream.writer_epoch:
        raise Fenced(f"stream {stream.name!r} belongs to writer epoch {stream.writer_epoch}; "
                     f"epoch {epoch} is fenced")
