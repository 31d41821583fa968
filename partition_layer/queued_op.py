"""An operation queued for the group commit (committer.py) and who hears how it went: a
future, or a callback run right where the outcome is known. Answered exactly once: a second
answer (the durable one after an early, speculative one, CURP) is a no-op."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.errors import StampError
from partition_layer import commit_spans
from partition_layer.operations import Operation

log = logging.getLogger(__name__)

# How a queued operation is answered without a future: (result, None) or (None, error).
Done = Callable[[Any, StampError | None], None]


@dataclass(slots=True)
class Pending:
    """A queued operation and who hears how it went: a future (`submit`), or a callback run
    right where the outcome is known (`submit_with`: no future, no loop turn per answer, on
    the hot path of small appends). Answered exactly once."""

    op: Operation
    nbytes: int
    started: float
    future: asyncio.Future[Any] | None = None
    done: Done | None = None
    span: Any = None  # "ps.commit", from queued to answered, while tracing is on
    hint: int = 0  # CURP's version hint: answer early if it may (speculation.py)
    recovered: bool = False  # executed again from a witness's record (speculation.replaying)

    def answer(self, result: Any, error: StampError | None) -> None:
        if self.span is not None:
            commit_spans.end(self.span, error)
            self.span = None
        if self.done is not None:
            done, self.done = self.done, None
            try:
                done(result, error)
            except Exception:  # an answer must not break the commit of the others
                log.exception("partition operation callback failed")
        elif self.future is not None and not self.future.done():
            if error is None:
                self.future.set_result(result)
            else:
                self.future.set_exception(error)


@dataclass
class Outcome:
    pending: Pending
    result: Any = None
    error: StampError | None = None
