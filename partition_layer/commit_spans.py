"""The committer's tracing spans (issue 31; common/tracing.py), apart from its logic: called
only while tracing is on, except `end`, which a Pending calls only when it holds a span.

- "ps.commit": one per operation, from queued to answered, in the current context (the
  request's trace, which ps_servicer.py continues from the request's traceparent).
- "ps.group_commit_wait": under each operation's "ps.commit", from queued until its block
  is decided.
- "ps.commit_log_append": the block's append, under the first traced operation's
  "ps.commit" (the stream client's span of the block goes under it), linked to the others'.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Sequence
from typing import Any

from common import tracing
from common.errors import StampError


def begin(partition_id: int, op: Any) -> Any:
    """A started "ps.commit" span of `op` on partition `partition_id`."""
    return tracing.begin("ps.commit", {"partition": partition_id,
                                       tracing.REQUEST_ID: getattr(op, "token", "")})


def end(span: Any, error: StampError | None) -> None:
    """End an operation's "ps.commit" with its outcome."""
    span.set_attribute("error", type(error).__name__ if error else "")
    span.end()


def waits(spans: Sequence[Any]) -> None:
    """A "ps.group_commit_wait" under each of the batch's "ps.commit" spans, ending now."""
    now = time.time_ns()
    for span in spans:
        # Not recording: its request's trace was sampled out upstream (no start time).
        if span is not None and span.is_recording():
            tracing.record("ps.group_commit_wait", span.start_time, now,
                           {"batch": len(spans)}, parent=tracing.under(span))


async def appending(append: Awaitable[Any], spans: Sequence[Any], nbytes: int,
                    ops: int) -> Any:
    """Await the block's `append` inside its "ps.commit_log_append" span."""
    first, *others = [s for s in spans if s is not None] or [None]
    with tracing.span("ps.commit_log_append", {"ops": ops, "bytes": nbytes,
                                               "batch": len(spans)},
                      parent=tracing.under(first) if first is not None else None,
                      links=others):
        return await append
