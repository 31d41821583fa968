"""The Stamp SDK, blocking (DESIGN §5): the same API as `stampsdk.aio.Client`, each method a
plain call, run on a private event loop (stampsdk/loop_thread.py) so it works from any
thread and from code that has an event loop of its own.

    from stampsdk import Client
    with Client.from_connection_string(text) as c:
        first = c.append("orders", [b"r1", b"r2"])
        for entity in c.scan("orders-2026"): ...

Argument rules, limits, signing, checksums, retries and errors: stampsdk/aio.py's docstring
(all of it holds here). A closed client raises InvalidArgument.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncIterator, Coroutine, Generator, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from stampsdk import aio, connection_string
from stampsdk._proto.frontend_v1_pb2 import AccountRange
from stampsdk.errors import InvalidArgument, StampError
from stampsdk.limits import Limits
from stampsdk.loop_thread import LoopThread
from stampsdk.requests import Row
from stampsdk.retry import RetryPolicy
from stampsdk.scan import AsyncScanIterator, Entity, Page

__all__ = ["Client", "Entity", "Page", "ScanIterator"]

T = TypeVar("T")
CLOSED = "this Stamp client is closed: make a new one"
# How long close() lets calls of other threads end on their own before it cancels them.
CLOSE_WAIT_S = 2.0


class Client:
    """Blocking, thread-safe facade over stampsdk.aio.Client (module docstring)."""

    def __init__(self, endpoints: Sequence[str], account: str, *, key: bytes | None = None,
                 sas: str | None = None, timeout_s: float = 30.0,
                 limits: Limits | None = None, policy: RetryPolicy | None = None,
                 tls: bool = False, ca_file: str | None = None,
                 location: Sequence[str] = (), read_from: str = "primary") -> None:
        """As stampsdk.aio.Client: front-end endpoints HOST:PORT (or none, and a location's
        servers in `location`), the account, exactly one of
        `key` and `sas`, how long one call may take (retries included), the limits
        arguments are checked against (stampsdk.Limits' defaults unless given), how calls
        are retried (`policy`: stampsdk.RetryPolicy's defaults unless given), TLS to
        the front ends (`tls`, `ca_file`), and where reads go (`read_from`: "primary", or
        "secondary" with a `location`: read access to the secondary, stampsdk/aio.py).
        InvalidArgument if any of them is malformed."""
        self._lock = threading.Condition()
        self._closing = False
        self._inflight = 0
        self._loop = LoopThread("stamp-sdk")
        try:
            self.aio: aio.Client = self._loop.run(_make(endpoints, account, key, sas,
                                                        timeout_s, limits, policy, tls,
                                                        ca_file, location, read_from))
        except BaseException:
            self._loop.close()
            raise

    @classmethod
    def from_connection_string(cls, text: str, timeout_s: float = 30.0, *,
                               limits: Limits | None = None,
                               policy: RetryPolicy | None = None) -> Client:
        """A client from a connection string (stampsdk/connection_string.py), with the
        constructor's `limits` and `policy`."""
        parsed = connection_string.parse(text)
        return cls(parsed.endpoints, parsed.account, key=parsed.key, sas=parsed.sas,
                   timeout_s=timeout_s, limits=limits, policy=policy, tls=parsed.tls,
                   ca_file=parsed.ca_file, location=parsed.location,
                   read_from=parsed.read_from)

    @property
    def account(self) -> str:
        """The account this client acts as (checked: a valid account name)."""
        return self.aio.account

    @property
    def read_from(self) -> str:
        """Where this client's reads go: "primary", or "secondary" (stampsdk/aio.py)."""
        return self.aio.read_from

    def last_sync_time(self) -> datetime | None:
        """As `stampsdk.aio.Client.last_sync_time`: the account's last sync time (UTC),
        asked of the location now: every write acknowledged before it is readable at the
        secondary; None when not known."""
        return self._run(self.aio.last_sync_time())

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        # Counted in flight under the lock that close() takes to stop new calls: a call is
        # never handed to the loop after close() stopped it (it would wait forever).
        with self._lock:
            if self._closing:
                coro.close()
                raise InvalidArgument(CLOSED)
            self._inflight += 1
        try:
            return self._loop.run(coro)
        except concurrent.futures.CancelledError:
            if self._closing:  # close() on another thread cancelled this call
                raise InvalidArgument(CLOSED) from None
            raise
        finally:
            with self._lock:
                self._inflight -= 1
                self._lock.notify_all()

    # ---- logs -------------------------------------------------------------------------------

    def append(self, log: str, records: Sequence[bytes], token: str | None = None) -> int:
        """As `stampsdk.aio.Client.append`: the first sequence number of `records`."""
        return self._run(self.aio.append(log, records, token))

    def read(self, log: str, from_seq: int = 0, limit: int = 1000) -> list[tuple[int, bytes]]:
        """As `stampsdk.aio.Client.read`: up to `limit` (seq, data) from `from_seq` on."""
        return self._run(self.aio.read(log, from_seq, limit))

    def subscribe(self, log: str, from_seq: int = 0) -> Iterator[tuple[int, bytes]]:
        """As `stampsdk.aio.Client.subscribe`: (seq, data) exactly once, in order, across
        failovers, until the log is sealed. Arguments are checked at once."""
        return _flat(self._iterate(self._run(_later(self.aio.subscribe_batches, log,
                                                     from_seq))))

    def trim(self, log: str, upto_seq: int) -> None:
        """As `stampsdk.aio.Client.trim`."""
        self._run(self.aio.trim(log, upto_seq))

    def seal(self, log: str) -> None:
        """As `stampsdk.aio.Client.seal`."""
        self._run(self.aio.seal(log))

    def peek(self, log: str) -> tuple[int, int]:
        """As `stampsdk.aio.Client.peek`: (first_seq, next_seq)."""
        return self._run(self.aio.peek(log))

    def list_logs(self, prefix: str = "") -> Iterator[str]:
        """As `stampsdk.aio.Client.list_logs`: log names starting with `prefix`, in order."""
        return self._iterate(self._run(_later(self.aio.list_logs, prefix)))

    # ---- entities ---------------------------------------------------------------------------

    def put(self, pname: str, row: Row, value: bytes, if_match: str | None = None,
            if_none_match: str | None = None) -> str:
        """As `stampsdk.aio.Client.put`: the new ETag."""
        return self._run(self.aio.put(pname, row, value, if_match, if_none_match))

    def get(self, pname: str, row: Row) -> tuple[bytes, str]:
        """As `stampsdk.aio.Client.get`: (value, etag)."""
        return self._run(self.aio.get(pname, row))

    def delete(self, pname: str, row: Row, if_match: str | None = None) -> None:
        """As `stampsdk.aio.Client.delete`."""
        self._run(self.aio.delete(pname, row, if_match))

    def batch(self, pname: str, ops: Sequence[tuple[Any, ...]]) -> list[str]:
        """As `stampsdk.aio.Client.batch`: one ETag per op ("" for a delete)."""
        return self._run(self.aio.batch(pname, ops))

    def scan(self, start: str | tuple[str, Row] | None = None,
             end: str | tuple[str, Row] | None = None, limit: int | None = None,
             continuation: str | None = None, page_rows: int | None = None
             ) -> ScanIterator:
        """As `stampsdk.aio.Client.scan`, as a blocking iterator of Entity with `.pages()` and
        `.continuation` (stampsdk/scan.py)."""
        it = self._run(_later(self.aio.scan, start, end, limit, continuation, page_rows))
        return ScanIterator(self, it)

    def scan_ranges(self) -> list[AccountRange]:
        """As `stampsdk.aio.Client.scan_ranges`: the account's range partitions, each as
        scan bounds."""
        return self._run(self.aio.scan_ranges())

    # ---- the client -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the client; every later call, and every call or iteration still running on
        another thread (a subscriber), raises InvalidArgument."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        # Closing the async client fails its calls and streams (InvalidArgument); those
        # still waiting (a backoff sleep) after a while are cancelled with the loop.
        self._loop.run(self.aio.close())
        with self._lock:
            self._lock.wait_for(lambda: self._inflight == 0, timeout=CLOSE_WAIT_S)
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _iterate(self, iterator: AsyncIterator[T]) -> Generator[T, None, None]:
        try:
            while True:
                try:
                    yield self._run(_anext(iterator))
                except StopAsyncIteration:
                    return
        finally:
            # The client may be closing under us (another thread following a log): then
            # the loop ends the generator itself.
            with contextlib.suppress(StampError):
                self._run(iterator.aclose())  # type: ignore[attr-defined]


class ScanIterator:
    """A blocking scan: iterate it for Entity, or `.pages()` for Page; `.continuation`
    resumes after the last item yielded (stampsdk/scan.py)."""

    def __init__(self, client: Client, it: AsyncScanIterator) -> None:
        self._client = client
        self._it = it

    @property
    def continuation(self) -> str | None:
        """An opaque string that resumes this scan exactly after the last Entity yielded,
        passed back as `scan(start, end, continuation=...)` with the same range; None before
        anything was yielded from a fresh scan, and once the scan is complete."""
        return self._it.continuation

    def __iter__(self) -> ScanIterator:
        return self

    def __next__(self) -> Entity:
        if not self._it.loaded and not self._client._run(self._it.fill()):
            raise StopIteration
        return self._it.take()

    def pages(self) -> Iterator[Page]:
        """The rest of the scan as Page(items, continuation), never an empty page: each
        page's continuation resumes after its last item, None after the scan's last page.
        After some Entities were taken, the first page is what is left of the current one."""
        return self._client._iterate(self._it.pages())

    def close(self) -> None:
        """Stop the scan and release its stream to the front end (a scan left unfinished
        otherwise holds it until the client closes). Never raises a StampError."""
        with contextlib.suppress(StampError):
            self._client._run(self._it.aclose())

    def __enter__(self) -> ScanIterator:
        return self

    def __exit__(self, *_: object) -> None:
        """`with client.scan(...) as scan:` closes the scan however the block ends."""
        self.close()


def _flat(batches: Generator[list[T], None, None]) -> Iterator[T]:
    try:
        for batch in batches:
            yield from batch
    finally:
        batches.close()


async def _anext(iterator: AsyncIterator[T]) -> T:
    return await iterator.__anext__()


async def _later(function: Any, *args: Any) -> Any:
    """Call a synchronous method of the async client on its loop (it may make tasks)."""
    return function(*args)


async def _make(endpoints: Sequence[str], account: str, key: bytes | None, sas: str | None,
                timeout_s: float, limits: Limits | None, policy: RetryPolicy | None,
                tls: bool, ca_file: str | None, location: Sequence[str],
                read_from: str) -> aio.Client:
    return aio.Client(endpoints, account, key=key, sas=sas, timeout_s=timeout_s,
                      limits=limits, policy=policy, tls=tls, ca_file=ca_file,
                      location=location, read_from=read_from)
