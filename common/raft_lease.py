"""Two decisions that `common.raft.DurableReplica` adds to pysyncobj's Raft, kept pure (no
I/O, no clock: times are arguments) so they are tested on tables.

**Majority contact** (what a leader lease is built on). The leader stamps every
append_entries it sends with (term, its monotonic send time); a follower echoes the stamp in
the reply it sends while handling that message (pysyncobj answers every append_entries it
takes with one `next_node_idx`). `majority_contact` is the latest time `s` such that a
majority of the group (the leader itself counted) acknowledged, in the leader's term, a
message the leader sent at or after `s`.
What it proves: a replica answers a term-T append_entries only while its own term is at most
T, so any vote it gives in a later term comes after that answer. Every majority that elects
a later leader holds a replica of the acknowledging majority; so a later leader is elected
after `s`, or with the vote of this leader itself (which votes only once it has left office).
A reply to a message sent before a freeze carries the old send time: a leader thawed after
any length of stop never mistakes stale replies for fresh contact.

**PreVote** (Raft thesis §9.6). A follower whose election timer fires first asks the others
whether they *would* vote for it in the next term, without changing any term. A replica says
yes only if it is not the leader, has not heard from a leader for the minimum election
timeout, and the asker's log is at least as up to date as its own. Only with a majority of
yeses does the follower start a real election. So a replica that was frozen or cut off and
comes back cannot depose a healthy leader by raising the term. A replica that says yes gives
the asker an election timeout to win, and of two that canvass at once only one goes on
(`steps_aside`): their real elections would split the vote and cost another timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# Message fields and types Stamp adds to pysyncobj's messages (pysyncobj ignores unknown
# fields, and message types it does not know; DurableReplica handles these itself).
SENT_FIELD = "stamp_sent"  # on append_entries: (term, leader's monotonic send time)
ECHO_FIELD = "stamp_echo"  # on next_node_idx: the SENT_FIELD of the message it answers
PRE_VOTE = "stamp_pre_vote"
PRE_VOTE_REPLY = "stamp_pre_vote_reply"


def majority_contact(acks: Mapping[Any, tuple[int, float]], term: int, cluster_size: int,
                     now: float) -> float | None:
    """The latest send time `s` such that a majority acknowledged, in `term`, a message sent
    at or after `s` (see the module docstring), or None if no majority did. `acks`: per other
    replica, the (term, send time) of the latest stamp it echoed. The leader counts itself
    as in contact `now`."""
    needed = cluster_size // 2  # besides the leader itself
    if needed == 0:
        return now
    times = sorted((sent for acked_term, sent in acks.values() if acked_term == term),
                   reverse=True)
    return times[needed - 1] if len(times) >= needed else None


def grant_pre_vote(*, asked_term: int, asker_last: tuple[int, int], my_term: int,
                   my_last: tuple[int, int], is_leader: bool, since_leader_s: float,
                   election_timeout_min_s: float) -> bool:
    """Whether to say yes to a pre-vote for `asked_term` (the asker's term + 1).
    `asker_last` / `my_last`: (last log term, last log index)."""
    if asked_term <= my_term or is_leader:
        return False
    if since_leader_s < election_timeout_min_s:
        return False  # a leader was alive a moment ago: do not help depose it
    return asker_last >= my_last


def steps_aside(my_id: str, asker_id: str) -> bool:
    """Two replicas canvass for the same term at once, each saying yes to the other: the one
    with the larger id drops its canvass, the other goes on to win the election."""
    return asker_id < my_id


@dataclass
class PreVoteRound:
    """One follower's canvass for `term`: who said yes (itself included)."""

    term: int
    cluster_size: int
    yes: set[Any] = field(default_factory=set)

    def record(self, voter: Any, term: int, granted: bool) -> bool:
        """Count one answer; True once a majority said yes to this round."""
        if term == self.term and granted:
            self.yes.add(voter)
        return self.won()

    def won(self) -> bool:
        return len(self.yes) > self.cluster_size // 2
