"""What makes a pysyncobj replica durable, shared by the lock service and the stream manager.

- `RaftTuning` / `durable_conf`: the SyncObjConf every Stamp Raft group uses. Batching of
  append_entries is off (with it on, every synchronous call waits 100-200 ms for a batch);
  timeouts are tuned so that a SIGKILLed leader is replaced in about a second; snapshots go
  through our own (fsynced, checksummed) serializer and never fork.
- `DurableTransport`: holds every outgoing Raft message while the journal has changes that
  are not durable, then syncs once for all of them (group commit) and sends them, at the end
  of each tick. So no peer ever sees an acknowledgement, a vote or an entry from this replica
  before what it implies is on this replica's disk.
- `DurableReplica`: a SyncObj wired to `DurableJournal` (common/raft_journal.py), the
  transport above and durable snapshots. A subclass supplies `snapshot_state` and
  `restore_state` and marks its state-changing methods with pysyncobj's `@replicated`.

The Raft port (§9) listens on the replica's own address only, never 0.0.0.0, and speaks only
to peers that hold the stamp secret (common/stamp_secret.py; pysyncobj's `password`): the
transport is built on `AuthenticatedTransport` (common/raft_auth.py), which refuses to run
without one, since pysyncobj unpickles every message it reads, and seals every message with
the secret (common/raft_seal.py: AES-GCM, in place of pysyncobj's Fernet).

Together with the journal's contract this gives: a command's callback reports success only
after its entry is on the disks of a majority (the leader syncs before it counts itself,
followers sync before they acknowledge).

pysyncobj deletes a follower's entries after `prevLogIdx` on every append_entries, matching
or not, so a resend cut short (several batches in flight, the leader's next index set back)
can take acknowledged entries out of the follower's log. `DurableReplica` plans every
append_entries with `common.raft_append.plan_append` before pysyncobj sees it (one override,
`_SyncObj__onMessageReceived`, in "Raft §5.3" below): only entries that conflict are deleted.

Two more additions, whose decisions live in common/raft_lease.py (see its docstring for the
arguments): every append_entries a leader sends carries (term, send time) and the follower's
reply echoes it, so `majority_contact_at(term)` tells the leader when a majority last heard
from it (the lock service builds its leader lease on that: lock_service/lessor.py); and
PreVote (`RaftTuning.pre_vote`): a follower canvasses before it raises its term, so a thawed
or reconnected replica cannot depose a healthy leader. CheckQuorum is pysyncobj's own
`leaderFallbackTimeout` (`RaftTuning.leader_fallback_s`): a leader that has not heard from a
majority that long steps down.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pysyncobj.syncobj as syncobj_module
from pysyncobj import SyncObj, SyncObjConf
from pysyncobj.monotonic import monotonic as raft_clock
from pysyncobj.syncobj import _RAFT_STATE
from pysyncobj.transport import Transport

from common import durable_fs
from common.checksums import crc32c
from common.durable_fs import fsync_dir
from common.raft_append import TransmissionAssembler, plan_append
from common.raft_auth import AuthenticatedTransport
from common.raft_journal import DurableJournal
from common.raft_lease import (
    ECHO_FIELD,
    PRE_VOTE,
    PRE_VOTE_REPLY,
    SENT_FIELD,
    PreVoteRound,
    grant_pre_vote,
    majority_contact,
    steps_aside,
)

log = logging.getLogger(__name__)

JOURNAL_FILE = "raft.journal"
SNAPSHOT_FILE = "raft.snapshot"
SNAPSHOT_MAGIC = b"STMPSN01"
SNAPSHOT_HEADER = struct.Struct("<QI")  # payload bytes, crc32c(payload)
# Messages held for one sync; past this the transport syncs early rather than grow.
HELD_MESSAGES_MAX = 10_000
EX_DATAERR = 65
# pysyncobj's timers (election deadline, next heartbeat) are on its own clock,
# CLOCK_MONOTONIC_RAW, which drifts from time.monotonic() (0.1 s after 8 h of uptime here):
# whatever reads or sets them uses `raft_clock`. Majority contact stays on time.monotonic().


@dataclass(frozen=True)
class RaftTuning:
    # A follower starts an election this long after the last heartbeat (random in range).
    # 0.4, not 0.3, so that heartbeats can go every 125 ms (pysyncobj wants the minimum
    # above 3 intervals); the maximum, hence the longest wait for a new leader, is unchanged.
    election_timeout_min_s: float = 0.4
    election_timeout_max_s: float = 0.8
    # Every heartbeat wakes all three replicas, the leader once per reply too: about 1 ms of
    # CPU a round here, which made an idle group of 3 cost 3.5% of a core at 75 ms (issue
    # 29). Only an idle leader sends them: one with entries to replicate sends at once.
    # Under a third of the minimum election timeout (`__post_init__`: a follower gives up on
    # a leader only after three missed heartbeats; and with PreVote one follower's early
    # timer deposes nobody, as the other heard the leader within the minimum timeout). A
    # lease built on them outlasts an interval plus a round trip (lock_service/limits.py).
    heartbeat_interval_s: float = 0.125
    # CheckQuorum: a leader that has not heard from a majority this long steps down (a
    # frozen or cut-off leader stops acting as one soon after its followers elect another).
    leader_fallback_s: float = 0.8
    # PreVote (common/raft_lease.py): canvass before raising the term.
    pre_vote: bool = True
    connection_timeout_s: float = 3.5
    # How often a replica retries connecting to a peer that is down (a restart rejoins fast).
    connection_retry_s: float = 0.5
    log_compaction_entries_min: int = 5000
    log_compaction_interval_s: float = 300.0
    commands_queue_max: int = 100_000
    # The tick thread sleeps until its next timer (a leader's heartbeat, a follower's
    # election deadline: `tick_wait`), woken early by messages and local commands, but never
    # longer than this (connection retries and CheckQuorum are checked on ticks).
    idle_tick_max_s: float = 0.5
    # False: no tick thread, the owner calls doTick (deterministic in-process tests).
    tick_thread: bool = True

    def __post_init__(self) -> None:
        assert 0 < self.election_timeout_min_s <= self.election_timeout_max_s
        # pysyncobj's own rule (SyncObjConf.validate), checked here with a reason.
        assert self.election_timeout_min_s > 3 * self.heartbeat_interval_s, (
            "a follower must hear three heartbeats within its minimum election timeout")


def durable_conf(raft_dir: Path, tuning: RaftTuning, replica: DurableReplica,
                 self_address: str, secret: bytes | None) -> SyncObjConf:
    return SyncObjConf(
        # The replica's own address, not every interface (pysyncobj's default: 0.0.0.0).
        bindAddress=self_address,
        # None only for the in-process test transports: DurableTransport refuses it.
        password=secret,
        appendEntriesUseBatch=False,
        raftMinTimeout=tuning.election_timeout_min_s,
        raftMaxTimeout=tuning.election_timeout_max_s,
        appendEntriesPeriod=tuning.heartbeat_interval_s,
        leaderFallbackTimeout=tuning.leader_fallback_s,
        connectionTimeout=tuning.connection_timeout_s,
        connectionRetryTime=tuning.connection_retry_s,
        commandsQueueSize=tuning.commands_queue_max,
        # Fail fast without a leader: the caller retries elsewhere rather than queue blind.
        commandsWaitLeader=False,
        journalFile=str(raft_dir / JOURNAL_FILE),
        fullDumpFile=str(raft_dir / SNAPSHOT_FILE),
        serializer=replica._write_snapshot_file,
        deserializer=replica._read_snapshot_file,
        useFork=False,
        logCompactionMinEntries=tuning.log_compaction_entries_min,
        logCompactionMinTime=tuning.log_compaction_interval_s,
        dynamicMembershipChange=False,
        autoTick=tuning.tick_thread,
        onStateChanged=replica._role_changed,
    )


def tick_wait(*, now: float, leader: bool, next_heartbeat_at: float,
              election_deadline: float, heartbeat_interval_s: float, max_s: float) -> float:
    """How long the tick thread may wait for network events after a tick (issue 29: an idle
    replica woke every 50 ms whatever its timers said). Until the timer that the next tick
    must act on: a leader's next heartbeat, a follower's (or candidate's) election deadline;
    at most `max_s`. A timer already due that the tick could not act on (no peer connected
    yet) is looked at again after one heartbeat interval, not in a busy loop. Messages and
    commands from other threads wake the poll sooner, so waiting longer delays nothing."""
    due = next_heartbeat_at if leader else election_deadline
    if due <= now:
        return min(max_s, heartbeat_interval_s)
    return min(max_s, due - now)


class DurableTransport(AuthenticatedTransport):
    """pysyncobj's TCP transport (peers authenticated, common/raft_auth.py; cut towards
    isolated peers, common/isolation_raft.py), holding messages until the journal is
    durable."""

    def __init__(self, syncObj: SyncObj, selfNode: Any, otherNodes: Any, *,
                 journal: DurableJournal) -> None:
        self._journal = journal
        self._held: list[tuple[Any, Any]] = []
        super().__init__(syncObj, selfNode, otherNodes)

    def send(self, node: Any, message: Any) -> bool:
        # A leader's append_entries may go before its own sync (Raft §10.2.1: the leader
        # writes in parallel with its followers): it claims nothing about the leader's disk,
        # and the leader only counts itself toward a commit after the journal's
        # setRaftCommitIndex has synced. Everything else waits for the sync.
        exempt = (not self._held and isinstance(message, dict)
                  and message.get("type") == "append_entries")
        if not exempt and (self._held or self._journal.dirty):
            # Behind held messages too: messages to a peer keep their order.
            if len(self._held) >= HELD_MESSAGES_MAX:
                self._flush()
            self._held.append((node, message))
            return True
        return super().send(node, message)

    def _onTick(self) -> None:
        # pysyncobj runs tick callbacks after the tick's work and before it polls the
        # network: the one sync here covers every change the tick (and the poll before it)
        # made.
        self._flush()
        super()._onTick()

    def _flush(self) -> None:
        self._journal.sync()
        held, self._held = self._held, []
        for node, message in held:
            super().send(node, message)


_journal_injection = threading.Lock()


@contextlib.contextmanager
def _injected_journal(journal: DurableJournal) -> Iterator[None]:
    """SyncObj builds its journal itself (`createJournal(conf.journalFile)`); hand it ours."""
    with _journal_injection:
        original = syncobj_module.createJournal
        syncobj_module.createJournal = lambda _path: journal
        try:
            yield
        finally:
            syncobj_module.createJournal = original


class DurableReplica(SyncObj):
    """A SyncObj whose journal and snapshots are durable (see the module docstring).

    Subclasses set up their state BEFORE calling this constructor: pysyncobj starts its tick
    thread inside it and may apply commands or load a snapshot at once. Avoid properties on
    subclasses: SyncObj's constructor calls getattr on every attribute it finds.
    """

    def __init__(self, self_address: str, peers: Sequence[str], raft_dir: str | Path,
                 tuning: RaftTuning | None = None,
                 make_transport: Callable[..., Transport] = DurableTransport,
                 secret: bytes | None = None) -> None:
        """`make_transport(sync_obj, self_node, other_nodes, journal=...)` builds the
        transport; it must hold every message until `journal` is durable, as
        DurableTransport does (tests pass an in-process one). `secret`: the stamp secret
        (common/stamp_secret.py), which the TCP transport requires; the Raft port is bound
        to `self_address` only."""
        self._raft_dir = Path(raft_dir)
        durable_fs.make_dirs(self._raft_dir)
        self._durable_journal = DurableJournal(self._raft_dir / JOURNAL_FILE)
        self._transmission = TransmissionAssembler()
        self._tuning = tuning or RaftTuning()
        # Majority contact and PreVote (common/raft_lease.py); tick thread only, except
        # `_contact`, which other threads read whole (one attribute, swapped, never mutated).
        self._acks: dict[Any, tuple[int, float]] = {}
        self._contact: tuple[int, float] | None = None
        self._echo: tuple[Any, Any] | None = None
        self._leader_heard_at = float("-inf")
        self._pre_vote_round: PreVoteRound | None = None
        self._pre_vote_won_term = -1
        self._role_listeners: list[Callable[[bool], None]] = []
        conf = durable_conf(self._raft_dir, self._tuning, self, self_address, secret)
        others = [peer for peer in peers if peer != self_address]

        def transport(sync_obj: SyncObj, self_node: Any, other_nodes: Any) -> Transport:
            built = make_transport(sync_obj, self_node, other_nodes,
                                   journal=self._durable_journal)
            send = built.send
            # pysyncobj sends through this attribute: every outgoing message passes here.
            built.send = lambda node, message: send(node, self._stamped(node, message))
            return built

        with _injected_journal(self._durable_journal):
            super().__init__(self_address, others, conf=conf, transportClass=transport)
        if self._tuning.tick_thread:
            # pysyncobj polls for autoTickPeriod after each tick; the poll is the one place
            # that sees every timer as the tick left it (a follower may have just become
            # leader), so the wait is chosen there (`tick_wait`).
            poll = self._poller.poll
            self._poller.poll = lambda _timeout: poll(self._tick_wait())

    # --- for subclasses ----------------------------------------------------------------------

    def snapshot_state(self) -> bytes:
        """The whole replicated state, as of the last applied command (tick thread)."""
        raise NotImplementedError

    def restore_state(self, blob: bytes) -> None:
        """Replace the whole replicated state by one `snapshot_state` returned."""
        raise NotImplementedError

    def on_role_change(self, listener: Callable[[bool], None]) -> None:
        """`listener(leader)` runs on the tick thread whenever this replica becomes leader
        or stops being one, so that work kept for the leader wakes then instead of polling
        for it (issue 29)."""
        self._role_listeners.append(listener)

    def _role_changed(self, old: Any, new: Any) -> None:
        for listener in self._role_listeners:
            listener(new == _RAFT_STATE.LEADER)

    # --- status ------------------------------------------------------------------------------

    def is_leader(self) -> bool:
        return self._isLeader()

    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else str(leader.id)

    def majority_contact_at(self, term: int) -> float | None:
        """The latest time.monotonic() send time `s` such that a majority acknowledged, in
        `term`, a message this replica sent as leader at or after `s` (common/raft_lease.py
        says what that proves); None if no majority has in `term`. Any thread."""
        if not self.otherNodes:
            return time.monotonic()
        contact = self._contact
        return contact[1] if contact is not None and contact[0] == term else None

    def raft_status(self) -> dict[str, Any]:
        """A racy but harmless look from another thread (plain attribute reads only)."""
        return {"role": "leader" if self._isLeader() else "follower",
                "term": self.raftCurrentTerm, "leader": self.leader_address() or "",
                "commit_index": self.raftCommitIndex, "last_applied": self.raftLastApplied,
                "log_entries": self._getRaftLogSize(),
                "journal_syncs": self._durable_journal.syncs}

    def close(self) -> None:
        """Stop the tick thread; the journal syncs and closes on the way out."""
        self.destroy()
        if self._tuning.tick_thread:
            notifier = getattr(self, "_SyncObj__pipeNotifier", None)
            if notifier is not None:
                notifier.notify()  # end its poll now, not at its next timer
        self.destroy_synchronous()

    def _tick_wait(self) -> float:
        """The tick thread's next poll timeout (`tick_wait`); tick thread only."""
        return tick_wait(now=raft_clock(),
                         leader=self._SyncObj__raftState == _RAFT_STATE.LEADER,
                         next_heartbeat_at=self._SyncObj__newAppendEntriesTime,
                         election_deadline=self._SyncObj__raftElectionDeadline,
                         heartbeat_interval_s=self._tuning.heartbeat_interval_s,
                         max_s=self._tuning.idle_tick_max_s)

    # --- Raft §5.3: delete only conflicting entries (the one patch of pysyncobj's handling) ---

    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        """Every message from a peer, on the tick thread: PreVote messages are ours; an echo
        counts toward majority contact; an append_entries pysyncobj will take is answered
        with its stamp echoed (`_stamped`) and marks a leader heard from."""
        kind = message.get("type") if isinstance(message, dict) else None
        if kind in (PRE_VOTE, PRE_VOTE_REPLY):
            self._on_pre_vote_message(node, message)
            return
        if kind == "next_node_idx" and ECHO_FIELD in message:
            self._on_echo(node, message[ECHO_FIELD])
        if kind == "append_entries" and message.get("term", -1) >= self.raftCurrentTerm:
            self._leader_heard_at = time.monotonic()
            self._echo = (node, message.get(SENT_FIELD))
            try:
                self._receive(node, message)
            finally:
                self._echo = None
            return
        self._receive(node, message)

    def _receive(self, node: Any, message: Any) -> None:
        """An append_entries is planned by `plan_append` (common/raft_append.py) and
        pysyncobj handles the planned one; anything else goes to pysyncobj as it came."""
        handle = SyncObj._SyncObj__onMessageReceived  # type: ignore[attr-defined]
        if (not isinstance(message, dict) or message.get("type") != "append_entries"
                or "prevLogIdx" not in message or message["term"] < self.raftCurrentTerm):
            handle(self, node, message)
            return
        entries = message.get("entries", [])
        if "transmission" in message:
            if message["transmission"] not in ("start", "process", "finish"):
                handle(self, node, message)  # pysyncobj refuses it
                return
            assembled = self._transmission.feed(message)
            if assembled is None:
                # A part: pysyncobj only acknowledges it (a "finish" that is not the last
                # part, TransmissionAssembler says why, goes to it as the part it is).
                handle(self, node, {**message, "transmission": "process"}
                       if message["transmission"] == "finish" else message)
                return
            entries = assembled
        journal = self._durable_journal
        if not len(journal):
            handle(self, node, message)
            return
        first = journal[0][1]
        last = journal[-1][1]

        def term_at(index: int) -> int | None:
            return journal[index - first][2] if first <= index <= last else None

        plan = plan_append(message["prevLogIdx"], message["prevLogTerm"], entries, term_at,
                           last, self.raftCommitIndex)
        planned = {key: value for key, value in message.items()
                   if key not in ("transmission", "data")}
        planned.update(prevLogIdx=plan.prev_index, prevLogTerm=plan.prev_term,
                       entries=list(plan.entries))
        if plan.hide_after is None:
            handle(self, node, planned)
            return
        with journal.tail_hidden(plan.hide_after):
            handle(self, node, planned)

    # --- majority contact and PreVote (common/raft_lease.py) ---------------------------------

    def _stamped(self, node: Any, message: Any) -> Any:
        """An outgoing message with our fields: a leader's append_entries carries (term, send
        time); the reply to one being handled echoes that. Tick thread."""
        if not isinstance(message, dict):
            return message
        kind = message.get("type")
        if kind == "append_entries" and self._isLeader():
            return {**message, SENT_FIELD: (self.raftCurrentTerm, time.monotonic())}
        echo = self._echo
        if kind == "next_node_idx" and echo is not None and echo[1] is not None \
                and echo[0] == node:
            return {**message, ECHO_FIELD: echo[1]}
        return message

    def _on_echo(self, node: Any, echo: Any) -> None:
        try:
            term, sent = echo
        except (TypeError, ValueError):
            return
        if not self._isLeader() or term != self.raftCurrentTerm:
            return
        known = self._acks.get(node)
        if known is None or known[0] != term or known[1] < sent:
            self._acks[node] = (term, sent)
        contact = majority_contact(self._acks, term, len(self.otherNodes) + 1, time.monotonic())
        if contact is not None:
            self._contact = (term, contact)

    def _onTick(self, timeToWait: float = 0.0) -> None:
        if self._tuning.pre_vote:
            self._pre_vote_gate()
        super()._onTick(timeToWait)

    def _pre_vote_gate(self) -> None:
        """Before pysyncobj would start an election (its timer ran out): unless a canvass
        for the next term was won, hold the election back one timeout and canvass."""
        if (self._SyncObj__raftState == _RAFT_STATE.LEADER or self._SyncObj__selfNode is None
                or getattr(self, "_SyncObj__transferInProgress", False)):
            return  # a leadership transfer: the leader itself asked for this election
        now = raft_clock()
        if (self._SyncObj__raftElectionDeadline >= now or not self.otherNodes
                or not self._SyncObj__connectedToAnyone()):
            return
        next_term = self.raftCurrentTerm + 1
        if self._pre_vote_won_term == next_term:
            return
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()
        self._pre_vote_round = PreVoteRound(next_term, len(self.otherNodes) + 1,
                                            {self._SyncObj__selfNode})
        message = {"type": PRE_VOTE, "term": next_term,
                   "last_log_index": self._SyncObj__getCurrentLogIndex(),
                   "last_log_term": self._SyncObj__getCurrentLogTerm()}
        for other in self.otherNodes:
            self._SyncObj__transport.send(other, message)

    def _on_pre_vote_message(self, node: Any, message: dict[str, Any]) -> None:
        try:
            if message["type"] == PRE_VOTE:
                granted = grant_pre_vote(
                    asked_term=int(message["term"]),
                    asker_last=(int(message["last_log_term"]), int(message["last_log_index"])),
                    my_term=self.raftCurrentTerm,
                    my_last=(self._SyncObj__getCurrentLogTerm(),
                             self._SyncObj__getCurrentLogIndex()),
                    is_leader=self._isLeader(),
                    since_leader_s=time.monotonic() - self._leader_heard_at,
                    election_timeout_min_s=self._tuning.election_timeout_min_s)
                self._SyncObj__transport.send(node, {"type": PRE_VOTE_REPLY,
                                                     "term": message["term"],
                                                     "granted": granted})
                if granted:
                    self._give_way(node, int(message["term"]))
                return
            canvass = self._pre_vote_round
            if (canvass is None or self._isLeader()
                    or canvass.term != self.raftCurrentTerm + 1):
                return
            if canvass.record(node, int(message["term"]), bool(message["granted"])):
                log.info("pre-vote for term %d won: starting the election", canvass.term)
                self._pre_vote_won_term, self._pre_vote_round = canvass.term, None
                self._SyncObj__raftElectionDeadline = 0  # pysyncobj elects on the next tick
        except (KeyError, TypeError, ValueError):
            log.warning("malformed %s from %s ignored", message.get("type"), node)

    def _give_way(self, asker: Any, term: int) -> None:
        """Having said yes to `asker`'s canvass for `term`: give it an election timeout to
        win (as Raft restarts the timer of a replica that votes), and if this replica is
        canvassing for the same term too, settle who goes on by id, so that two replicas
        whose timers fired together do not split the vote (pysyncobj checks timers once a
        tick, which makes that common)."""
        canvass = self._pre_vote_round
        running = (canvass is not None and canvass.term == term) or self._pre_vote_won_term == term
        if running and not steps_aside(str(self._SyncObj__selfNode.id), str(asker.id)):
            return  # this one goes on; the asker steps aside when our canvass reaches it
        self._pre_vote_round = None
        if self._pre_vote_won_term == term:
            self._pre_vote_won_term = -1
        self._SyncObj__raftElectionDeadline = max(
            self._SyncObj__raftElectionDeadline,
            raft_clock() + self._SyncObj__generateRaftTimeout())

    # --- snapshot files (pysyncobj's serializer hooks) ----------------------------------------

    def _write_snapshot_file(self, path: str, raft_data: tuple[Any, Any, Any]) -> None:
        last_entry, prev_entry, cluster = raft_data
        payload = pickle.dumps({"last": last_entry, "prev": prev_entry,
                                "cluster": sorted(str(node.id) for node in cluster),
                                "state": self.snapshot_state()}, protocol=5)
        data = SNAPSHOT_MAGIC + SNAPSHOT_HEADER.pack(len(payload), crc32c(payload)) + payload
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)  # pysyncobj renames it into place; the journal fsyncs the directory
        finally:
            os.close(fd)

    def _read_snapshot_file(self, path: str) -> tuple[Any, Any, list[str]]:
        # A snapshot received from the leader was written without fsync: make it durable
        # before pysyncobj clears the journal it replaces.
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(Path(path).parent)
        data = Path(path).read_bytes()
        head = len(SNAPSHOT_MAGIC) + SNAPSHOT_HEADER.size
        length, crc = SNAPSHOT_HEADER.unpack_from(data, len(SNAPSHOT_MAGIC)) \
            if len(data) >= head else (-1, 0)
        payload = data[head:]
        if not data.startswith(SNAPSHOT_MAGIC) or length != len(payload) or crc32c(payload) != crc:
            # Going on without it would silently lose the entries it covers: stop instead.
            log.critical("raft snapshot %s is corrupt: stopping", path)
            logging.shutdown()
            os._exit(EX_DATAERR)
        snapshot = pickle.loads(payload)
        self.restore_state(snapshot["state"])
        return snapshot["last"], snapshot["prev"], snapshot["cluster"]
