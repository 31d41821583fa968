"""The Stamp SDK, asyncio (DESIGN §5): logs, entities and scans of one account, through the
stamp's front ends, in Stamp's public protocol (`stamp.frontend.v1.FrontEnd`).

    from stampsdk.aio import Client
    async with Client.from_connection_string(text) as c:
        first = await c.append("orders", [b"r1", b"r2"])
        async for seq, data in c.subscribe("orders", first): ...

`stampsdk.Client` is the same API, blocking. Every method checks its arguments before
anything is sent: a bad argument raises InvalidArgument naming the rule or the limit
(stampsdk/requests.py has the full rules). The limits are the stamp's (stampsdk/limits.py;
pass `limits=` for a stamp configured otherwise); defaults:

    account, log and partition names   3..63 of a-z, 0-9 and single '-', starting and
                                       ending with a letter or a digit (stampsdk/names.py)
    record                             at most 1 MiB (record_bytes_max)
    append                             1..10,000 records (append_records_max), at most
                                       4 MiB in all (append_bytes_max)
    value                              at most 4 MiB - 4 KiB (value_bytes_max)
    row key                            1..1024 bytes (row_bytes_max); str is UTF-8
    batch                              1..100 operations (batch_ops_max)
    token                              1..128 bytes
    read                               returns at most 10,000 records and about 4 MiB
                                       (read_records_max, read_bytes_max) per call
    scan                               limit and page_rows: positive, at most 2**32 - 1

What every call does:
- it is signed (stampsdk/wire.py) with the account's key or shared access token, at send
  time: a retried request carries a fresh timestamp;
- records and values carry their CRC32C, and what reads return is checked against the
  CRC32C the stamp stored with it: a mismatch raises ChecksumError, never wrong bytes;
- data operations share one `Call` stream per front end (many requests per message);
- an error that may pass (Unavailable, NotOwner, Throttled after its retry-after,
  DeadlineExceeded) is retried with exponential backoff and jitter (stampsdk/retry.py),
  on another endpoint of the connection string when the front end itself failed or said
  nothing for the attempt's time (short at first: a frozen front end costs about a
  second; stampsdk/retry.py AttemptTimer), until `timeout_s` after the call began; then
  the last error is raised. Every mutation carries a
  token (appends: the caller's or one made here; puts, deletes, batches: one made here), so
  a retry after an ambiguous failure is answered from the first attempt and applied once.
  Any other error (InvalidArgument, Unauthenticated, PermissionDenied, PreconditionFailed,
  NotFound, Sealed, Trimmed, ChecksumError...) is raised at once.
- a closed client raises InvalidArgument("... client is closed").

Errors are stampsdk/errors.py's StampError subclasses, and nothing else. Every call may raise
Unauthenticated (a bad or rotated key, an expired token, a clock more than 5 minutes off),
PermissionDenied (a token without the permission or the name prefix), Unavailable or
DeadlineExceeded (no front end answered within `timeout_s`), Throttled (still refused at the
timeout), besides what each method names.

Read access to the secondary (issue 30; Azure's RA-GRS): a client whose connection string
names a `Location` and says `ReadFrom=secondary` (or made with `read_from="secondary"`)
sends its reads — `read`, `peek`, `get`, `subscribe`, `scan`, `list_logs`, `scan_ranges`
(READ_OPS and the streams: what a geo secondary's front ends answer) — to the front ends of
the account's secondary stamp, as the location names it, and its writes to the primary as
any client does. What it reads there is the primary's data as of a moment in the past, the
secondary's lag behind: `last_sync_time()` bounds it (every write acknowledged before that
time is there); a write through the client may not be read back through it at once. While
the location says the secondary is not live (bootstrapping, or unavailable after an unplanned
failover), its reads raise SecondaryNotLive at once, sent nowhere: never a partial or
diverged copy, and never silently the primary's. After a failover the location names the
roles swapped, and reads follow the secondary as writes follow the primary
(stampsdk/location.py: the answer's TTL, a failing front end, Moved). Its reads are marked
as reads of the secondary (stampsdk/wire.py READ_FROM_METADATA): a secondary's front ends
answer no other, so a client reading from the primary whose answer still names the old
primary after a failover is sent on (Moved) instead of reading a copy behind it. With
`Endpoint=` front ends and `ReadFrom=secondary`, reads go to those, marked so.

An asyncio Client belongs to the event loop it is first used on (its streams live there);
the blocking stampsdk.Client may be shared by threads.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from typing import Any, TypeVar, cast

import grpc

from stampsdk import connection_string, tracing, wire
from stampsdk import requests as sdk_requests
from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk._proto import frontend_v1_pb2_grpc as fe_grpc
from stampsdk.channels import ChannelCache, tls_credentials
from stampsdk.checksums import verify_records, verify_value
from stampsdk.clock import Clock, SystemClock
from stampsdk.errors import (
    DeadlineExceeded,
    InvalidArgument,
    Moved,
    StampError,
    Throttled,
    Unavailable,
    from_name,
    from_rpc_error,
)
from stampsdk.limits import Limits
from stampsdk.location import Resolver, sync_time
from stampsdk.requests import Row
from stampsdk.retry import AttemptTimer, Endpoints, RetryPolicy, endpoint_failed
from stampsdk.scan import AsyncScanIterator, Batches, Entity, Page, ScanCursor, ScanRange
from stampsdk.session import CallSession

__all__ = ["AsyncScanIterator", "Client", "Entity", "Page"]

T = TypeVar("T")
TOKEN_PREFIX_BYTES = 12  # 96 random bits: no two clients share a prefix
CLOSED = "this Stamp client is closed: make a new one"
# The Call ops that only read: a geo secondary's front ends answer them (their shared-access
# permission is `read`), and a client reading from the secondary sends them there.
READ_OPS = frozenset({"read", "peek", "get"})


class Client:
    """One account's view of a stamp, through its front ends (module docstring)."""

    def __init__(self, endpoints: Sequence[str], account: str, *, key: bytes | None = None,
                 sas: str | None = None, timeout_s: float = 30.0,
                 limits: Limits | None = None, policy: RetryPolicy | None = None,
                 clock: Clock | None = None, rng: random.Random | None = None,
                 tls: bool = False, ca_file: str | None = None,
                 location: Sequence[str] = (), read_from: str = "primary") -> None:
        """`endpoints`: front ends as HOST:PORT, or none and `location`: the servers of a
        location service, which say where the account's primary stamp is (issue 30:
        stampsdk/location.py; a stamp that answers Moved sends the client back to ask
        again, and the call goes on at the new primary); `read_from`: "primary" (the
        default) or "secondary": reads go to the account's secondary stamp (with
        `endpoints`: the front ends named are read as the secondary's; module docstring);
        exactly one of `key` (an account key) and `sas` (a shared access token of
        `account`); `timeout_s`: how long one call may take,
        retries included; `tls` (implied by `ca_file`): TLS to the front ends, trusting the
        CA in `ca_file` or else the system's roots; without either, a plain connection;
        `limits`: what arguments are checked against (any object with stampsdk.Limits'
        attributes). InvalidArgument if any of them is malformed."""
        if isinstance(endpoints, str):
            raise InvalidArgument("endpoints are a sequence of HOST:PORT strings, not a str")
        checked = connection_string.make(list(endpoints), account, key=key, sas_token=sas,
                                         tls=tls, ca_file=ca_file, location=list(location),
                                         read_from=read_from)
        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) \
                or not 0 < timeout_s < float("inf"):
            raise InvalidArgument(f"timeout_s is a positive number of seconds, not "
                                  f"{timeout_s!r:.40}")
        self.account = checked.account
        # "secondary": reads go to the account's secondary stamp (module docstring).
        self.read_from = checked.read_from
        self._reads_secondary = checked.read_from == connection_string.SECONDARY
        self.timeout_s = float(timeout_s)
        self.limits = limits or Limits()
        self._credentials = wire.Credentials(checked.account, checked.key, checked.sas)
        self._policy = policy or RetryPolicy()
        self._clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._attempts = AttemptTimer()
        self._channels = ChannelCache(
            getattr(self.limits, "rpc_message_bytes_max", Limits.rpc_message_bytes_max),
            tls_credentials(checked.ca_file) if checked.tls else None)
        # Fixed front ends, or those the location names (None until it first answered).
        self._endpoints: Endpoints | None = (
            Endpoints(checked.endpoints, self._clock, self._rng) if checked.endpoints
            else None)
        self._resolver = (Resolver(checked.location, checked.account, self._channels,
                                   self._clock, self._rng, self._reads_secondary)
                          if checked.location else None)
        self._resolved: tuple[str, ...] = ()
        # The secondary's front ends, as the location last named them, for a client reading
        # there (None until its first read).
        self._read_endpoints: Endpoints | None = None
        self._read_resolved: tuple[str, ...] = ()
        # One Call stream per front end, and one more for a client's reads of the secondary:
        # those are marked (wire.READ_FROM_METADATA), and a front end may be named as the
        # secondary's and, in an answer not yet expired, as the primary's.
        self._sessions: dict[tuple[str, bool], CallSession] = {}
        # Mutation tokens: a random prefix and a counter (unique without a urandom per call).
        self._token_prefix = os.urandom(TOKEN_PREFIX_BYTES).hex()
        self._tokens = itertools.count()
        self._closed = False

    @classmethod
    def from_connection_string(cls, text: str, timeout_s: float = 30.0, *,
                               limits: Limits | None = None,
                               policy: RetryPolicy | None = None) -> Client:
        """A client from `Endpoint=...;Account=...;Key=...` (or `SharedAccessSignature=...`),
        stampsdk/connection_string.py, with the constructor's `limits` and `policy`;
        InvalidArgument if it is malformed."""
        parsed = connection_string.parse(text)
        return cls(parsed.endpoints, parsed.account, key=parsed.key, sas=parsed.sas,
                   timeout_s=timeout_s, limits=limits, policy=policy, tls=parsed.tls,
                   ca_file=parsed.ca_file, location=parsed.location,
                   read_from=parsed.read_from)

    @property
    def endpoints(self) -> list[str]:
        """The front ends of this client, as given or as the location last named them
        (none before a client with a location made its first call)."""
        return self._endpoints.all if self._endpoints is not None else []

    @property
    def next_endpoint(self) -> str:
        """The front end the next call goes to (the last one that answered, unless it
        failed since); "" before a client with a location made its first call."""
        return self._endpoints.pick() if self._endpoints is not None else ""

    @property
    def read_endpoints(self) -> list[str]:
        """The front ends reads go to: the secondary's, as the location last named them, for
        a client reading from the secondary (none before its first read); `endpoints` for
        any other client."""
        if not self._reads_secondary:
            return self.endpoints
        return self._read_endpoints.all if self._read_endpoints is not None else []

    @property
    def location_answer(self) -> Any:
        """What the location last said of the account (stampsdk/location.py Resolution:
        its primary and secondary stamps, the secondary's state, the placement's epoch, the
        last sync time), or None: a client of fixed front ends, or none asked yet."""
        return self._resolver.answer if self._resolver is not None else None

    async def last_sync_time(self) -> datetime | None:
        """The account's last sync time, asked of the location now (not its last answer): an
        aware datetime in UTC such that every write acknowledged before it is at the
        secondary stamp, and so readable by a client reading from the secondary; None when
        it is not known (not reported yet, or the secondary is not live: nothing is synced
        to it). It lags the truth by a few seconds (the primary reports it every few), never
        the other way. InvalidArgument for a client of fixed front ends (no location to
        ask); Unavailable when no location server answered within `timeout_s`."""
        self._check_open()
        if self._resolver is None:
            raise InvalidArgument("last_sync_time needs a connection string with "
                                  "Location=... (a location knows the last sync time)")
        answer = await self._resolver.ask(self._clock.monotonic() + self.timeout_s)
        return sync_time(answer.last_sync_ms)

    # ---- logs -------------------------------------------------------------------------------

    async def append(self, log: str, records: Sequence[bytes], token: str | None = None
                     ) -> int:
        """Append `records` to `log` atomically, at consecutive sequence numbers; returns the
        first one. `token` makes a retry by the caller exactly-once too (without one, only
        this call's own retries are). Raises Sealed, PermissionDenied, InvalidArgument..."""
        self._check_open()
        request = sdk_requests.append_request(
            self.account, log, records, self._token() if token is None else token,
            self.limits)
        # Sized from the caller's records: request_bytes would read each one back out of
        # the message, a copy of every record.
        nbytes = sdk_requests.append_bytes(records)
        return (await self._call(request, nbytes=nbytes)).first_seq

    async def read(self, log: str, from_seq: int = 0, limit: int = 1000
                   ) -> list[tuple[int, bytes]]:
        """Up to `limit` records of `log` from `from_seq` on, as (seq, data), in order (maybe
        fewer: at most Limits.read_records_max / read_bytes_max per call; none at
        the log's end; a log never written is empty). Raises Trimmed below the log's first
        record, OutOfRange past its end, InvalidArgument if `log` names an entity group,
        ChecksumError if a record does not match the CRC32C stored with it."""
        self._check_open()
        response = await self._call(sdk_requests.read_request(self.account, log, from_seq,
                                                              limit))
        return verify_records(response.records, f"log {log!r}")

    def subscribe(self, log: str, from_seq: int = 0) -> AsyncIterator[tuple[int, bytes]]:
        """The records of `log` from `from_seq` on as they are appended, each exactly once and
        in order, across front-end and partition-server failovers (a broken stream is
        resubscribed at the next sequence number, on another front end if need be); ends
        when the log is sealed and everything was delivered. Gives up with the last error
        after `timeout_s` of failed attempts with no record in between. Arguments are
        checked at once (InvalidArgument)."""
        return _flatten(self.subscribe_batches(log, from_seq))

    def subscribe_batches(self, log: str, from_seq: int = 0
                          ) -> AsyncIterator[list[tuple[int, bytes]]]:
        """`subscribe`, one list of records per reply of the front end (never empty): for a
        caller that takes many at once (the blocking client crosses threads once a list)."""
        self._check_open()
        sdk_requests.seal_request(self.account, log)  # checks the name
        return self._subscribe(log, sdk_requests.check_seq("from_seq", from_seq))

    async def _subscribe(self, log: str, next_seq: int
                         ) -> AsyncIterator[list[tuple[int, bytes]]]:
        # Failed attempts in a row, and when they must stop: a healthy stream may be idle
        # for hours, so the deadline runs from the first failure after the last reply.
        attempt, deadline = 0, None
        while True:
            self._check_open()
            endpoint = await self._pick(deadline if deadline is not None
                                        else self._clock.monotonic() + self.timeout_s,
                                        read=True)
            request = pb.SubscribeRequest(account=self.account, pname=log, from_seq=next_seq)
            wire.sign_subscribe(request, self._credentials, self._clock.wall())
            stream = fe_grpc.FrontEndStub(self._channels.get(endpoint)).Subscribe(
                request, metadata=self._read_metadata(self._reads_secondary))
            try:
                async for reply in stream:
                    # Records before next_seq were delivered by an earlier stream.
                    records = [r for r in verify_records(reply.records, f"log {log!r}")
                               if r[0] >= next_seq]
                    self._answered(endpoint)
                    attempt, deadline = 0, None
                    if records:
                        next_seq = records[-1][0] + 1
                        yield records
                return
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            except asyncio.CancelledError:
                self._cancelled_by_close()
                raise
            finally:
                stream.cancel()
            if deadline is None:
                deadline = self._clock.monotonic() + self.timeout_s
            await self._after_failure(endpoint, error, attempt, deadline, idempotent=True)
            attempt += 1

    async def trim(self, log: str, upto_seq: int) -> None:
        """Drop the records of `log` below `upto_seq` (a trim never moves back)."""
        self._check_open()
        await self._call(sdk_requests.trim_request(self.account, log, upto_seq))

    async def seal(self, log: str) -> None:
        """Seal `log`: appends are refused (Sealed) from now on; subscribers end."""
        self._check_open()
        await self._call(sdk_requests.seal_request(self.account, log))

    async def peek(self, log: str) -> tuple[int, int]:
        """(first_seq, next_seq) of `log`: its first untrimmed record and its end; (0, 0)
        for a log never written."""
        self._check_open()
        response = await self._call(sdk_requests.peek_request(self.account, log))
        return response.first_seq, response.next_seq

    def list_logs(self, prefix: str = "") -> AsyncIterator[str]:
        """The account's log names that start with `prefix`, in name order, across range
        partitions (an async iterator; InvalidArgument at once for a malformed prefix)."""
        self._check_open()
        cursor = ScanCursor(self.account, ScanRange.log_names(prefix))
        return self._log_names(cursor)

    async def _log_names(self, cursor: ScanCursor) -> AsyncIterator[str]:
        async for items, _ in self._scan_batches(cursor):
            for entity in items:
                yield entity.pname

    # ---- entities ---------------------------------------------------------------------------

    async def put(self, pname: str, row: Row, value: bytes, if_match: str | None = None,
                  if_none_match: str | None = None) -> str:
        """Write `value` at (pname, row); returns the new ETag. `if_match`: only over that
        ETag; `if_none_match="*"`: only if the row does not exist (PreconditionFailed
        otherwise)."""
        self._check_open()
        request = sdk_requests.put_request(self.account, pname, row, value, if_match,
                                           if_none_match, self._token(), self.limits)
        return (await self._call(request)).etag

    async def get(self, pname: str, row: Row) -> tuple[bytes, str]:
        """(value, etag) of (pname, row); NotFound if there is none, ChecksumError if the
        value does not match its stored CRC32C."""
        self._check_open()
        response = await self._call(sdk_requests.get_request(self.account, pname, row,
                                                             self.limits))
        value = verify_value(response.value, response.value_crc,
                             f"the value of row {row!r:.80} of {pname!r}")
        return value, response.etag

    async def delete(self, pname: str, row: Row, if_match: str | None = None) -> None:
        """Delete (pname, row); NotFound if there is none, PreconditionFailed if `if_match`
        is not its ETag."""
        self._check_open()
        await self._call(sdk_requests.delete_request(self.account, pname, row, if_match,
                                                     self._token(), self.limits))

    async def batch(self, pname: str, ops: Sequence[tuple[Any, ...]]) -> list[str]:
        """Apply `ops` (`("put", row, value[, if_match])`, `("delete", row[, if_match])`) to
        rows of `pname` atomically: all or none. Returns one ETag per op ("" for a
        delete)."""
        self._check_open()
        request = sdk_requests.batch_request(self.account, pname, ops, self._token(),
                                             self.limits)
        return list((await self._call(request)).etags)

    def scan(self, start: str | tuple[str, Row] | None = None,
             end: str | tuple[str, Row] | None = None, limit: int | None = None,
             continuation: str | None = None, page_rows: int | None = None
             ) -> AsyncScanIterator:
        """Entities of the account in key order from `start` up to, not including, `end`,
        across range partitions, at most `limit` of them (stampsdk/scan.py: bounds and
        continuations). `continuation` resumes a scan of the same range after its last item;
        `page_rows` caps the rows of one page. Each partition's part is a consistent
        snapshot. Arguments are checked at once (InvalidArgument)."""
        self._check_open()
        cursor = ScanCursor(self.account, ScanRange.of(start, end, self.limits), limit,
                            page_rows, continuation)
        return AsyncScanIterator(cursor, self._scan_batches, continuation)

    async def _scan_batches(self, cursor: ScanCursor) -> Batches:
        """The cursor's pages from the front ends, resumed after the last page received when
        a stream breaks (retries as `_call`'s, the deadline renewed by every page)."""
        attempt, deadline = 0, self._clock.monotonic() + self.timeout_s
        while not cursor.finished:
            self._check_open()
            endpoint = await self._pick(deadline, read=True)
            request = cursor.request()
            wire.sign_scan(request, self._credentials, self._clock.wall())
            stream = fe_grpc.FrontEndStub(self._channels.get(endpoint)).Scan(
                request, metadata=self._read_metadata(self._reads_secondary))
            pages = stream.__aiter__()
            try:
                while True:
                    try:
                        page = await _next_within(pages, self._page_wait_s(deadline))
                    except StopAsyncIteration:
                        cursor.finished = True
                        return
                    batch = cursor.accept(page)
                    self._answered(endpoint)
                    attempt, deadline = 0, self._clock.monotonic() + self.timeout_s
                    yield batch
                    if cursor.finished:  # the limit was reached here: read no further
                        return
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            except asyncio.TimeoutError:
                error = DeadlineExceeded(f"{endpoint} sent no scan page in time")
            except asyncio.CancelledError:
                self._cancelled_by_close()
                raise
            finally:
                stream.cancel()
            await self._after_failure(endpoint, error, attempt, deadline, idempotent=True)
            attempt += 1

    async def scan_ranges(self) -> list[pb.AccountRange]:
        """The account's range partitions, in key order, each as `scan` bounds: scanning each
        and concatenating is one scan of the account. For planning parallel scans; the
        partitions may split or merge right after."""
        attempt, deadline = 0, self._clock.monotonic() + self.timeout_s
        while True:
            self._check_open()
            endpoint = await self._pick(deadline, read=True)
            request = pb.ScanRangesRequest(account=self.account)
            wire.sign_scan_ranges(request, self._credentials, self._clock.wall())
            stub = fe_grpc.FrontEndStub(self._channels.get(endpoint))
            try:
                reply = await stub.ScanRanges(
                    request, timeout=self._attempt_s(deadline, attempt),
                    metadata=self._read_metadata(self._reads_secondary))
            except grpc.RpcError as exc:
                error = from_rpc_error(exc)
            else:
                self._answered(endpoint)
                return list(reply.ranges)
            await self._after_failure(endpoint, error, attempt, deadline, idempotent=True)
            attempt += 1

    # ---- the client -------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the streams and channels; every later call raises InvalidArgument."""
        if self._closed:
            return
        self._closed = True
        # Closing a session fails every call waiting in it (Unavailable), which
        # `_after_failure` turns into InvalidArgument(CLOSED): none waits past close.
        for session in self._sessions.values():
            await session.close()
        await self._channels.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument(CLOSED)

    def _cancelled_by_close(self) -> None:
        """A stream was cancelled: by `close` (its channel closed under it), say so; a
        cancellation of the caller's own task goes on as it is."""
        if self._closed:
            raise InvalidArgument(CLOSED) from None

    def _token(self) -> str:
        return f"{self._token_prefix}-{next(self._tokens)}"

    def _attempt_s(self, deadline: float, attempt: int = 0, nbytes: int = 0) -> float:
        """How long attempt `attempt` waits (stampsdk/retry.py AttemptTimer), within the
        call's `deadline`."""
        return max(0.05, min(self._attempts.timeout_s(attempt, nbytes),
                             deadline - self._clock.monotonic()))

    def _page_wait_s(self, deadline: float) -> float:
        """How long a scan waits for its next page: the longest attempt (a page may take its
        server a while to fill, and a scan started again costs the pages before it)."""
        return max(0.05, min(self._attempts.max_s, deadline - self._clock.monotonic()))

    async def _pick(self, deadline: float, read: bool = False) -> str:
        """The front end the next attempt goes to: of the connection string, or of the
        account's primary as the location says (asked when its answer is older than its
        TTL; stampsdk/location.py) — of its secondary for a `read` of a client reading
        there (SecondaryNotLive while it is not live: module docstring)."""
        if self._resolver is None:
            return cast(Endpoints, self._endpoints).pick()
        if read and self._reads_secondary:
            front_ends = await self._resolver.secondary_front_ends(deadline)
            if self._read_endpoints is None or front_ends is not self._read_resolved:
                self._read_endpoints = Endpoints(front_ends, self._clock, self._rng)
                self._read_resolved = front_ends
            return self._read_endpoints.pick()
        front_ends = await self._resolver.front_ends(deadline)
        if self._endpoints is None or front_ends is not self._resolved:
            self._endpoints = Endpoints(front_ends, self._clock, self._rng)
            self._resolved = front_ends
        return self._endpoints.pick()

    def _rotation_of(self, endpoint: str) -> Endpoints | None:
        """The rotation `endpoint` was picked from: the secondary's for one of its front
        ends, else the primary's (or the fixed ones); None if neither is made yet."""
        if self._read_endpoints is not None and endpoint in self._read_resolved:
            return self._read_endpoints
        return self._endpoints

    def _answered(self, endpoint: str) -> None:
        rotation = self._rotation_of(endpoint)
        if rotation is not None:
            rotation.answered(endpoint)

    def _session(self, endpoint: str, secondary_read: bool = False) -> CallSession:
        """The Call stream to `endpoint`: the one marked as reading the secondary for
        `secondary_read` (module docstring)."""
        session = self._sessions.get((endpoint, secondary_read))
        if session is None:
            session = CallSession(endpoint, lambda: cast(Any, fe_grpc.FrontEndStub(
                self._channels.get(endpoint))), self._read_metadata(secondary_read))
            self._sessions[endpoint, secondary_read] = session
        return session

    @staticmethod
    def _read_metadata(secondary_read: bool) -> tuple[tuple[str, str], ...] | None:
        """The metadata of a call: marked for a read of the secondary (stampsdk/wire.py),
        else none."""
        return wire.READ_FROM_METADATA if secondary_read else None

    async def _call(self, request: pb.Request, idempotent: bool = True,
                    nbytes: int | None = None) -> pb.Response:
        """Send `request` until it is answered or may not be retried (module docstring);
        `nbytes`: its size if the caller knows it (requests.request_bytes). Traced as one
        span while tracing is on (stampsdk/tracing.py)."""
        if tracing.ENABLED:
            if tracing.outermost():
                return await tracing.traced(self._call, request, idempotent, nbytes,
                                            tracing.request_id(request, self._token),
                                            self.account)
            # Inside the call's span: the stream carries no context per call, the request
            # does (signed with it; the front end continues the trace).
            request.traceparent = tracing.traceparent()
        if nbytes is None:
            nbytes = sdk_requests.request_bytes(request)
        # A read of a client reading from the secondary goes there (module docstring).
        read = self._reads_secondary and request.WhichOneof("op") in READ_OPS
        attempt, deadline = 0, self._clock.monotonic() + self.timeout_s
        while True:
            self._check_open()
            endpoint = await self._pick(deadline, read)
            wait_s = self._attempt_s(deadline, attempt, nbytes)
            # The attempt's wait travels with it: a front end (or a partition server behind
            # it) that takes it up after that drops it instead of doing it.
            request.timeout_ms = max(1, round(wait_s * 1000))
            wire.sign_call(request, self._credentials, self._clock.wall())
            future = self._session(endpoint, read).submit(request, wait_s, nbytes)
            sent = self._clock.monotonic()
            try:
                response = await future
            except StampError as exc:
                error = exc
            else:
                self._attempts.observe(self._clock.monotonic() - sent)
                self._answered(endpoint)
                if not response.error:
                    return response
                error = from_name(response.error, response.message)
                if isinstance(error, Throttled):
                    error.retry_after_s = response.retry_after_s
            await self._after_failure(endpoint, error, attempt, deadline, idempotent)
            attempt += 1

    async def _after_failure(self, endpoint: str, error: StampError, attempt: int,
                             deadline: float, idempotent: bool) -> None:
        """Wait before the next attempt, or raise `error` if there is none to make."""
        self._check_open()  # closed under the call: say so, not what closing broke
        if isinstance(error, Moved) and self._resolver is not None:
            await self._after_moved(error, attempt, deadline)
            return
        rotation = self._rotation_of(endpoint) if endpoint_failed(error) else None
        if rotation is not None:
            rotation.failed(endpoint)
            if self._resolver is not None:
                self._resolver.suspect()  # the account may have failed over: ask again
        delay = self._policy.delay(error, attempt, idempotent, self._rng)
        if delay is None or self._closed or self._clock.monotonic() + delay > deadline:
            raise error
        await asyncio.sleep(delay)


    async def _after_moved(self, error: Moved, attempt: int, deadline: float) -> None:
        """A stamp refused the request (not executed: any call may be sent again) because
        it is not the account's primary: ask the location again; go on at once if it names
        another primary, else wait a backoff step (the location has not caught up with the
        move yet) and try again, until the call's deadline, when `error` is raised."""
        try:
            if await self._resolver.moved(deadline):  # type: ignore[union-attr]
                return
        except StampError as exc:  # the location unreachable: wait as for an unchanged one
            error = Moved(f"{error}; asking the location again failed: {exc}")
        delay = self._policy.delay(Unavailable(str(error)), attempt, True, self._rng)
        if delay is None or self._closed or self._clock.monotonic() + delay > deadline:
            raise error
        await asyncio.sleep(delay)


async def _flatten(batches: AsyncIterator[list[T]]) -> AsyncIterator[T]:
    try:
        async for batch in batches:
            for item in batch:
                yield item
    finally:
        await batches.aclose()  # type: ignore[attr-defined]


async def _next_within(pages: AsyncIterator[T], timeout_s: float) -> T:
    """The next item of `pages`, or asyncio.TimeoutError after `timeout_s`. A cancellation of
    the caller that arrives with the item is not dropped (as asyncio.wait_for may in 3.11):
    the item is abandoned and the cancellation goes on, so a closed client's scan stops."""
    task = asyncio.ensure_future(_anext(pages))
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise asyncio.TimeoutError
    return task.result()


async def _anext(pages: AsyncIterator[T]) -> T:
    return await pages.__anext__()
