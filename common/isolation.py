"""Network partitions without killing anyone: a process-wide set of peers this process is cut
off from, enforced on every path in and out of it (issue 15, "partitions, tested").

A peer is named by its process name (`ps-1`, `sm-2`) and by its addresses (gRPC `host:port`,
Raft `host:port`); `stamp isolate` resolves names to all of them. Arming, like a fault point:
- from the environment at start: STAMP_ISOLATE="en-2,127.0.0.1:7001,...",
- at run time through the Faults gRPC service (`Isolate` / `Heal`, common/rpc.py),
- or in-process with `isolate(...)` / `heal(...)` (unit tests).

Contract: while a peer is cut, nothing passes between it and this process, either way.
- Outgoing gRPC (common/isolation_grpc.py): every channel Stamp makes (common/rpc.py) is a
  `GuardedChannel`; a call to a cut address fails UNAVAILABLE at once, as it would across a
  real partition.
- Incoming gRPC: every Stamp channel names its process in the user agent
  (`stamp-process/NAME`); `ServerGuard`, on every Stamp server, refuses a call from a cut
  name with UNAVAILABLE. The Faults service is exempt: it is the operator's channel, the way
  a heal reaches an isolated process.
- Calls already under way when a peer is cut (append and forward streams live for minutes)
  are ended at the cut, in both directions, so no old stream carries a message across.
- Raft (pysyncobj TCP, not gRPC): `common.isolation_raft.IsolatingTransport` drops messages
  to and from a cut Raft address and closes its connections.
The cut is made in the isolated process alone: every path in and out goes through these
hooks, so its peers need no change, and it cannot heal itself (only `heal` lifts the cut).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

ENV_VAR = "STAMP_ISOLATE"
USER_AGENT_PREFIX = "stamp-process/"

_process_name = f"client-{os.getpid()}"
# Replaced, never mutated: the Raft tick thread and sync-channel callers read it unlocked.
_cut: frozenset[str] = frozenset()
# Called with the new cut set after each `isolate`: they end the calls under way that it cuts.
_on_cut: list[Callable[[frozenset[str]], None]] = []


# --- the cut set ---------------------------------------------------------------------------

def set_process_name(name: str) -> None:
    """Name this process (servers: at start, before any channel is made)."""
    global _process_name
    _process_name = name


def process_name() -> str:
    return _process_name


def user_agent() -> str:
    return f"{USER_AGENT_PREFIX}{_process_name}"


def cut_peers() -> frozenset[str]:
    return _cut


def is_cut(peer: str | None) -> bool:
    return bool(_cut) and peer is not None and peer in _cut


def isolate(peers: Iterable[str]) -> frozenset[str]:
    """Cut this process off from `peers` (names and addresses), both directions, and end
    every call under way to or from them (`on_cut`). Returns the whole cut set."""
    global _cut
    added = {p.strip() for p in peers if p.strip()}
    _cut = _cut | added
    if added:
        log.warning("isolated from %s", ",".join(sorted(added)))
    for callback in _on_cut:
        callback(_cut)
    return _cut


def heal(peers: Iterable[str] | None = None) -> frozenset[str]:
    """Lift the cut from `peers`, or from every peer when None. Returns what stays cut."""
    global _cut
    _cut = frozenset() if peers is None else _cut - {p.strip() for p in peers}
    log.warning("healed; still cut off from %s", ",".join(sorted(_cut)) or "nobody")
    return _cut


def on_cut(callback: Callable[[frozenset[str]], None]) -> None:
    """Have `callback(cut set)` run after every `isolate` (on the caller's thread and loop)."""
    _on_cut.append(callback)


def parse(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def arm_from_env() -> None:
    """At start (no call is under way yet)."""
    peers = parse(os.environ.get(ENV_VAR, ""))
    if peers:
        isolate(peers)
