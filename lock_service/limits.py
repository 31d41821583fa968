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

# A long-poll for a lock to become free holds one RPC at most this long; a replica holds
# at most this many at once.
WAIT_MAX_S = 60.0
WAITERS_MAX = 10_000

# A retried request (same request id) gets its first result if it arrives within this much
# state time of the first one; clients give up on a request well before that.
DEDUP_WINDOW_S = 120.0
DEDUP_ENTRIES_MAX = 200_000

RPC_MESSAGE_BYTES_MAX = 4 * MiB
