"""One background-loop helper for every periodic job of a process (STYLE.md "one mechanism
per concern", OpenStack Swift's `Daemon`): a node's heartbeat, the stream manager's node
monitor, the partition manager's assignment pass.

Contracts:
- `run_forever` runs `step` every `interval_s` (after each step, so steps never overlap)
  until it is cancelled, and nothing a step raises ends it: a loop that dies on an
  unexpected exception stops heartbeats, monitoring or assignment for good while the
  process looks healthy, which is worse than any error a step can meet.
- A Stamp error (an expected failure: a peer down, no leader yet) is logged as a warning
  without traceback; any other exception (a bug) with its traceback. A persistent failure
  is logged on its first occurrence and then at most once per `log_every_s`, with the count
  in between, so it cannot flood the log; the first success after failures says so.
- Cancellation (and KeyboardInterrupt, SystemExit) passes through at once: stopping the
  task stops the loop, within a step or a sleep.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from common.clock import Clock, SystemClock
from common.errors import StampError

log = logging.getLogger(__name__)

# A failure that persists is logged at most this often: often enough that an operator
# reading the last minute of a log sees it, rarely enough that a step failing every 10 ms
# writes one line a minute, not thousands.
LOG_EVERY_S = 60.0

Step = Callable[[], Awaitable[object]]
Sleep = Callable[[float], Awaitable[object]]


class FailureLog:
    """Rate-limited logging of a repeated failure, on an injected clock.

    `failed(exc)` logs the first failure of a run, then at most one per `log_every_s` (with
    how many were not logged since); `succeeded()` logs once that a failing run ended.
    Returns of `failed` say whether it logged (for tests)."""

    def __init__(self, name: str, logger: logging.Logger = log,
                 log_every_s: float = LOG_EVERY_S, clock: Clock | None = None) -> None:
        self.name = name
        self.logger = logger
        self.log_every_s = log_every_s
        self.clock = clock or SystemClock()
        self.failures = 0  # in the current run of failures
        self._unlogged = 0
        self._logged_at: float | None = None

    def failed(self, exc: BaseException) -> bool:
        self.failures += 1
        now = self.clock.monotonic()
        if self._logged_at is not None and now - self._logged_at < self.log_every_s:
            self._unlogged += 1
            return False
        more = f" ({self._unlogged} more failures not logged)" if self._unlogged else ""
        if isinstance(exc, StampError):
            self.logger.warning("%s failed: %s%s", self.name, exc, more)
        else:  # a bug: the traceback is what its reader needs
            self.logger.error("%s failed unexpectedly%s", self.name, more,
                              exc_info=(type(exc), exc, exc.__traceback__))
        self._logged_at, self._unlogged = now, 0
        return True

    def succeeded(self) -> None:
        if self.failures:
            self.logger.info("%s works again after %d failures", self.name, self.failures)
        self.failures, self._unlogged, self._logged_at = 0, 0, None


async def run_forever(name: str, step: Step, interval_s: float, *,
                      delay_first: bool = False, logger: logging.Logger = log,
                      log_every_s: float = LOG_EVERY_S, clock: Clock | None = None,
                      sleep: Sleep = asyncio.sleep) -> None:
    """Run `step` for ever, `interval_s` apart (sleeping first if `delay_first`), logging
    what it raises through a `FailureLog` and going on (the module's contracts). Returns
    only by cancellation."""
    failures = FailureLog(name, logger, log_every_s, clock)
    if delay_first:
        await sleep(interval_s)
    while True:
        await run_once(step, failures)
        await sleep(interval_s)


async def run_once(step: Step, failures: FailureLog) -> bool:
    """One step; True if it succeeded. What it raises (but cancellation) goes to `failures`."""
    try:
        await step()
    except Exception as exc:  # the point of the helper: nothing a step raises ends the loop
        failures.failed(exc)
        return False
    failures.succeeded()
    return True
