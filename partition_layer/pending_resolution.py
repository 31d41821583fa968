"""What the partition manager does with a split or merge left pending (split17 design, "PM
flow" step 4): a pure decision, taken every pass for each pending op with no PS call in
flight, and after a leader change.

Inputs: whether the stream manager holds the op's first new stream (`partition/<C or
E>/meta`: the PS's multi-modify is atomic, so that one stream says the op committed), the
live servers, where a new server would go, and how many PS calls already failed. Rules:
- committed -> publish (children / merged on the op's server if it lives, else on `spare`);
- unknown (the stream manager did not answer) -> wait: never guess;
- not committed and `attempts_max` calls failed -> roll back (drop the op; the parent's
  streams are intact, its loader clears the intent);
- not committed, the op's server dead -> reassign the sources to `spare` and call there;
- else call the op's server again (Split / Merge are idempotent on the PS).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from partition_layer.partition_map import PendingOp

PUBLISH = "publish"
RETRY = "retry"
REASSIGN = "reassign"
ROLL_BACK = "roll back"
WAIT = "wait"


@dataclass(frozen=True)
class Resolution:
    action: str       # publish | retry | reassign | roll back | wait
    server: str = ""  # publish: where the results are served; retry / reassign: whom to call
    why: str = ""


def resolve(op: PendingOp, committed: bool | None, live: Collection[str], spare: str | None,
            attempts_max: int) -> Resolution:
    if committed is None:
        return Resolution(WAIT, why="the stream manager did not say whether it committed")
    if committed:
        if op.server in live:
            return Resolution(PUBLISH, op.server, "committed")
        if spare is None:
            return Resolution(WAIT, why="committed, but no live partition server to serve it")
        return Resolution(PUBLISH, spare, f"committed; {op.server} is not live")
    if op.attempts >= attempts_max:
        return Resolution(ROLL_BACK, why=f"not committed after {op.attempts} failed attempts")
    if op.server not in live:
        if spare is None:
            return Resolution(WAIT, why=f"{op.server} is not live and no server is")
        return Resolution(REASSIGN, spare, f"{op.server} is not live")
    return Resolution(RETRY, op.server, "not committed yet")
