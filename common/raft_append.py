"""How a follower takes an append_entries without losing entries that match the leader's
(Raft §5.3), as a pure decision that `common.raft.DurableReplica` applies before pysyncobj
handles the message.

pysyncobj 0.3.17 deletes every entry after `prevLogIdx` and appends the message's entries
again, whether they conflict or not. When a message ends before the follower's log does (the
leader's next index regressed while several batches were in flight: a success reply to an
early batch sets it back, and the resend is cut at appendEntriesBatchSizeBytes), entries the
follower already acknowledged vanish from its log while the leader counts them replicated;
should the leader die then, the follower can win the election without them and overwrite
committed entries.

Raft's rule, which `plan_append` implements: "If an existing entry conflicts with a new one
(same index but different terms), delete the existing entry and all that follow it. Append
any new entries not already in the log." Entries that match are never deleted.

Contract of `plan_append` (follower's log given as `term_at` and `last_index`):
- A message whose previous entry the log does not hold (or holds with another term) is left
  as it is: pysyncobj refuses it, which is right.
- Otherwise the entries that match the log are dropped from the message and `prev` moves to
  the last of them, so pysyncobj deletes only from the first conflicting entry (or deletes
  nothing when the new entries start past the log's end, or when they all match up to the
  log's end: a resend, which then carries no entries).
- When every entry matches and the log goes further, pysyncobj must neither delete the rest
  nor count it (it may be an old term's uncommitted tail): the plan carries no entries, an
  `anchor` (the last index known to match the leader: the message's last entry, or the
  follower's commit index if higher, whose entries every later leader holds), and
  `hide_after = anchor`. The replica hides its entries past the anchor while pysyncobj
  handles the message, so its reply (next index anchor + 1) and its commit index
  (at most the anchor) claim only what matches, and then puts them back.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Entry = tuple[bytes, int, int]  # (command, index, term), as pysyncobj sends them


@dataclass(frozen=True)
class AppendPlan:
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    hide_after: int | None = None  # hide the log's entries past this index while handling


def plan_append(prev_index: int, prev_term: int, entries: Sequence[Entry],
                term_at: Callable[[int], int | None], last_index: int,
                commit_index: int) -> AppendPlan:
    """The message pysyncobj should handle instead (see the module docstring)."""
    unchanged = AppendPlan(prev_index, prev_term, tuple(entries))
    if term_at(prev_index) != prev_term:
        return unchanged
    matched = 0
    for _command, index, term in entries:
        if term_at(index) != term:
            break
        matched += 1
    if matched < len(entries):
        if matched == 0:
            return unchanged
        _command, index, term = entries[matched - 1]
        return AppendPlan(index, term, tuple(entries[matched:]))
    last_matched = entries[-1][1] if entries else prev_index
    if last_index <= last_matched:
        if not entries:
            return unchanged
        # Every entry is already here, up to the log's end: nothing to delete or add.
        # Handled as it came, pysyncobj would delete them and append them again, in the
        # journal too: acknowledged (even applied) entries out of the log until the adds
        # are durable, and lost if a power cut tears the adds off.
        return AppendPlan(last_matched, entries[-1][2], ())
    anchor = max(last_matched, min(commit_index, last_index))
    anchor_term = term_at(anchor)
    assert anchor_term is not None, f"entry {anchor} is in the log"
    return AppendPlan(anchor, anchor_term, (), hide_after=anchor)


class TransmissionAssembler:
    """Collects an entry too big for one message (pysyncobj's 'start' / 'process' / 'finish'
    transmission) so that its final message can be planned like any other: `feed` returns
    the entries once the last part is in, None before."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def feed(self, message: dict[str, Any]) -> list[Entry] | None:
        kind = message["transmission"]
        if kind == "start":
            self._parts = [message["data"]]
            return None
        self._parts.append(message["data"])
        if kind == "process":
            return None
        # pysyncobj's sender marks "finish" every part that reaches the end of the entry's
        # command, but the parts cut the pickled entry, some bytes longer: when the command
        # ends within those bytes of a part's end, that part and the next are both
        # "finish". The entry is whole when it unpickles.
        data = b"".join(self._parts)
        try:
            entry = pickle.loads(data)
        except (pickle.UnpicklingError, EOFError, ValueError):
            return None
        self._parts = []
        return [entry]
