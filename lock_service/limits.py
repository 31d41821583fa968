"""Every limit of the lock service, as named constants with their unit last (STYLE.md).

The state machine enforces the ones that shape the replicated state (it must: a bad command
that got into the log is still applied deterministically); the servicer checks the same ones
first so a bad request never reaches the log.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB

# Names of locks and holders, and keys of the metadata store (UTF-8 bytes).
NAME_BYTES_MAX = 512
HOLDER_BYTES_MAX = 256
KEY_BYTES_MAX = 1024
# "Small metadata": a value fits comfortably in one Raft entry.
VALUE_BYTES_MAX = 256 * KiB
KEYS_MAX = 100_000
LEASES_MAX = 10_000

TTL_MIN_S = 0.2
TTL_MAX_S = 300.0

LIST_KEYS_MAX = 10_000
# A List with values carries at most this many bytes of them (the rest of its keys without):
# well within RPC_MESSAGE_BYTES_MAX.
LIST_VALUE_BYTES_MAX = 1 * MiB

# A long-poll for a lock to become free holds one RPC at most this long; a replica holds
# at most this many at once.
WAIT_MAX_S = 60.0
WAITERS_MAX = 10_000

# A retried request (same request id) gets its first result if it arrives within this much
# state time of the first one; clients give up on a request well before that.
DEDUP_WINDOW_S = 120.0
DEDUP_ENTRIES_MAX = 200_000

RPC_MESSAGE_BYTES_MAX = 4 * MiB

# One Expire command ends at most this many leases (the leader logs more if more are due).
EXPIRE_TOKENS_MAX = 1000

# A follower that hears no leader for a random time in this range canvasses for election
# (common/raft_lease.py). Narrower than the stream manager's (0.4-0.8 s): a lease renewal
# caught by a leader change waits about this long, and a 2 s lease is renewed every 0.5 s.
# The minimum sets the read lease (READ_LEASE_FRACTION of it, below), which must outlast a
# heartbeat interval plus a round trip, or an idle leader's reads go through the log: 0.4,
# not 0.3, since idle heartbeats go every 125 ms (issue 29; common/raft.py RaftTuning). The
# maximum, which bounds how long a leader change keeps renewals waiting, is unchanged.
ELECTION_TIMEOUT_MIN_S = 0.4
ELECTION_TIMEOUT_MAX_S = 0.5
HEARTBEAT_INTERVAL_S = 0.125

# Leases that ride out a leader change (lock_service/lessor.py argues why they are safe).
# A leader answers renewals from memory only while a majority acknowledged, in its term,
# messages it sent less than this long ago (common/raft_lease.py); else through the log.
# Heartbeats go every 125 ms when idle (HEARTBEAT_INTERVAL_S): a healthy leader holds it
# with room to spare.
LEADER_LEASE_S = 0.5
# A new leader gives every lease at least ttl + this from when it takes office. Safety
# needs it at least LEADER_LEASE_S (plus clock drift, which the holder's margin also covers);
# beyond that it is time for holders to find the new leader.
PROMOTE_EXTEND_S = 1.0
assert PROMOTE_EXTEND_S >= 1.5 * LEADER_LEASE_S, "a new leader must outlast the old one's lease"
# A leader answers Get and List from its state, without a Raft write, while a majority
# acknowledged, in its term, messages it sent less than this fraction of the minimum election
# timeout ago (lock_service/replica.py `read_leased` argues why no other leader can exist
# then); else the read goes through the log.
READ_LEASE_FRACTION = 0.6
# Room the read lease leaves after a heartbeat interval for the round trip and a late tick.
READ_LEASE_SLACK_S = 0.075
assert READ_LEASE_FRACTION * ELECTION_TIMEOUT_MIN_S >= HEARTBEAT_INTERVAL_S + READ_LEASE_SLACK_S, \
    "an idle leader's read lease must outlast a heartbeat interval"
