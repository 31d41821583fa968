"""CURP in the partition layer (issue 32, DESIGN §11): what commutes, and the plan it serves.

This module owns the rule the front ends and witnesses apply the same way — which writes
commute — as `Footprint`s. The rest of the protocol is built on it, in these steps (the
plan; each step names where it lives once built):

1. **Witnesses** (stream_layer/extent_node/witness_table.py, witness.py): a store in each
   extent node, its own group-committed journal, that records a write for a range partition
   only if its footprint conflicts with no record it holds for that partition (`conflicts`),
   durably before it accepts; refuses records of an owner older than the partition's fence,
   and refuses when full. Extent nodes, not processes of their own: they already sit in
   three fault domains with a journal that group-commits on its own disk, and a stamp keeps
   its process count (a witness record is one more small journal record beside the
   replicas' own).
2. **Placement** (partition_layer/witness_set.py): the owner picks three witnesses when it loads
   the partition — extent nodes in three fault domains, from the stream manager's nodes, spread
   by partition id — and records them in the partition's metadata record before it serves, so
   the next owner knows whom to fence. A front end learns them from the owner: a hinted write
   names the owner epoch whose witnesses it was recorded at (`Request.curp_epoch`); the owner
   answers early only a write that names its own epoch, and answers one that names another when
   durable, with its witnesses and epoch (`Response.witnesses`). A set's epoch is its owner's
   and which of its sets (witness_set.set_epoch): a witness lost while the owner serves
   (silent to its sweep, and suspect or dead at the stream manager) is replaced the way a
   lost replica is — the owner stops answering early, waits until every early answer is
   durable, fences and clears a new set under its next set epoch and names it
   (witness_repick.py); front ends learn it from the answers. An owner that could fence no
   set at load serves without one (the sync path) and tries again every sweep interval.
3. **Fast path** (front end): a write with a footprint (an append or entity write needs its
   token, by which recovery deduplicates it) goes to the owner and to the three witnesses at
   once. The owner executes it (decides it in the committer against the rows and the blocks in
   flight, as today) and answers at once — *speculatively* — if it read no row that a write in
   flight (not yet synced) wrote, exactly (the committer knows each op's rows, finer than a
   footprint), else when it is durable, as today, its answer then marked synced. Acknowledged:
   a synced answer, or a speculative one and three acceptances. Otherwise (a refusal, a witness
   silent past a short timeout) the front end asks the owner to sync through the write's LSN
   and answers when it has.
   Two rules keep a witness's record from being executed against its answer (recovery
   executes the records it finds, whatever the owner answered):
   - Only writes whose refusals never flip take the fast path: appends (a sealed log stays
     sealed, a name's kind never changes, a token's count never does) and unconditional
     puts and batches of them, each with the token the owner's sweep judges its records by
     (step 6). A seal, which has none, keeps the sync path. A refusal that a later write
     could turn into success — a conditional write's PreconditionFailed, a delete's NotFound, a
     trim's OutOfRange — would be executed by a recovery after that write although it was
     answered refused: those take the sync path (until refusals leave completion records
     in the commit log, as RIFL keeps them).
   - A fast write the owner did not execute (NotOwner, Throttled, past its deadline) is
     not answered with that definite refusal once its records went out: the front end
     retries it (same token) and, out of time, answers Unavailable (in doubt), since a
     recovering owner may still execute the record until the owner's sweep drops it.
4. **Versions**: an entity's ETag is its row's version, today above every version the
   partition holds (`max(LSN, floor + 1)`, committer.py); but recovery re-executes unsynced
   writes in another order than the owner did, so a fast write's version must not depend on
   the order. The front end sends a `version_hint` with the request (to the owner and the
   witnesses alike): its hybrid clock, µs of wall time raised past every version it has seen
   in an answer. The owner answers a write speculatively only if the hint is above the
   partition's floor (the highest version it holds, synced or not), and gives it the version
   max(the row's version + 1, hint) = the hint: above every version the row ever had (no
   ETag comes back), and the same at recovery, where the row's previous version is the same
   (no unsynced write conflicts with it). A hint at or below the floor (a front end's clock
   behind) takes the sync path, with today's version. Log operations answer no version
   (a sequence number depends only on the log), so their rows keep today's, hint or none.
   Nothing orders by version (geo shipping orders by commit position): a re-executed write
   may carry a lower version than one synced after it, of another row.
5. **Reads** that touch a row a speculative write wrote wait for its sync:
   a speculative write may still vanish in a crash, and no read may see what can vanish
   (§8 invariant 7). Scans and subscriptions see only synced writes.
6. **Garbage**: as each block is durable the owner tells its witnesses to drop its writes'
   tokens (speculation.py, witness_set.OwnerCalls.drop: batched, not awaited, under its
   epoch — a deposed owner's drop below a witness's fence is ignored). What that misses —
   a drop lost, a record landing after its drop, a record whose write never reached the
   owner — the owner's sweep (witness_sweep.py) drops: every couple of seconds it lists the
   records held a while, drops those whose write is durable, and those whose write it never
   executed once it has *condemned* their token (the committer answers such a write only
   when durable from then on, so no acknowledgement rests on a record that is gone). Entity
   tokens expire, and a trimmed log's token rows go, only once older than the TTL at the last
   sweep that reached every witness, so a witness out of reach keeps its records' tokens
   too (a recovery would otherwise execute a leftover again). A witness refuses records whose
   deadline passed by its own clock (only the sync path follows), and is full per node: one
   hot partition can push others to the sync path.
7. **Recovery** (witness_replay.py): a loading owner fences the witnesses its newest metadata
   names with its epoch, before it replays the commit log (one answering witness is enough: an
   acknowledged write is on all three, and a fenced witness accepts nothing more of an older
   owner, so no write of the old owner can be acknowledged after); then executes their records
   in any order — they commute — each answered from its token if the log holds it already, and
   only once durable; then names its own set; then clears the old set *below* its epoch. A write
   whose record reached a witness but never the owner may so take effect after its deadline: it
   was in doubt (Unavailable or DeadlineExceeded, both ambiguous), and in doubt it may take
   effect at any time.
8. **Splits and merges** (parent_witnesses.py): a split or merge drains its parents first —
   the server stops them admitting and settles their committers (no block in flight: every
   early answer durable) before it writes the intent (split_merge.py asserts it) — so once it
   commits, every record a parent's witnesses hold is garbage: a durable write's whose Drop
   has not come, or one the parent never executed (never acknowledged; a retry goes to a
   child, under the child's id). The partition manager then has every extent node drop the
   parent's id for good (DropPartition: its records go, anything sent for it later is
   FENCED), in `_publish` (manager_ops.py): only for an op known committed, and before it
   writes the map that forgets the op, so a manager that crashes first leaves the op pending
   and its successor's pass publishes it and calls again. Every node, not only the parent's
   newest set: a witness of an older set that a recovery's clear missed holds the id's
   records too. Best effort: a node that fails the call is logged and keeps them.

**What is not built, so CURP stays off by default**: a node down or cut off when a split or merge
publishes keeps its parents' records (nothing retries its DropPartition).

What commutes (the issue's list): appends to different logs; puts and deletes of different
rows; conditional operations and batches by the rows they touch; trims and seals by the log
(the footprints below say so of every write; `footprint_of` gives one only to the writes
of the fast path, step 3).
Appends to one log do not (their sequence numbers depend on the order). A name is a log or an
entity group, fixed by its first write (operations.py): an entity write holds its name
*shared* (two writes of an entity group commute, whichever creates the group) and its rows
exclusively; a log operation holds its name exclusively. Two footprints conflict when one
holds exclusively a key the other holds at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from common.proto import partition_pb2 as pb
from partition_layer import keys

# The kinds of request that may take the fast path (step 3: writes whose refusals never
# flip). Reads never go to witnesses; a scan, a trim, a seal, a delete, a conditional write
# or a replicated row from another stamp (issue 30) keeps the sync path.
FAST_OPS = frozenset({"append", "put", "batch"})


@dataclass(frozen=True)
class Footprint:
    """The keys a write touches: `exclusive` ones it may change in a way that depends on
    the order of writes, `shared` ones it only reads or changes the same way whatever the
    order (an entity group's mark)."""

    exclusive: frozenset[bytes]
    shared: frozenset[bytes] = frozenset()

    def conflicts(self, other: Footprint) -> bool:
        """Whether the two writes may not be reordered (module docstring)."""
        return not (self.exclusive.isdisjoint(other.exclusive)
                    and self.exclusive.isdisjoint(other.shared)
                    and self.shared.isdisjoint(other.exclusive))

    def keys(self) -> frozenset[bytes]:
        return self.exclusive | self.shared


def name_key(account: str, pname: str) -> bytes:
    """The key that stands for a whole name (a log, or an entity group's mark)."""
    return keys.encode_key(account, pname, keys.KIND_META, b"")


def row_key(account: str, pname: str, row: bytes) -> bytes:
    return keys.encode_key(account, pname, keys.KIND_ENTITY, row)


def footprint_of(request: pb.Request) -> Footprint | None:
    """`request`'s footprint if it may take the fast path (FAST_OPS, step 3), else None:
    another kind, a conditional write or a batch with a delete (their refusals may flip),
    or an append or entity write without the token recovery deduplicates it by."""
    op = request.WhichOneof("op")
    if op not in FAST_OPS:
        return None
    name = name_key(request.account, request.pname)
    if op == "append":
        return Footprint(frozenset((name,))) if request.append.token else None
    if not request.token:
        return None
    if op == "put":
        put = request.put
        if put.if_match or put.if_none_match:
            return None
        rows: Iterable[bytes] = (put.row,)
    else:
        items = request.batch.items
        if any(i.kind != "put" or i.if_match or i.if_none_match for i in items):
            return None
        rows = (item.row for item in items)
    return Footprint(frozenset(row_key(request.account, request.pname, row) for row in rows),
                     frozenset((name,)))
