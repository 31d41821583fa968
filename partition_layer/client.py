"""The partition client: logs and entities by key, routed by a cached partition map (§4, §5).
This Python API is a contract (the front end's SDK mirrors it):

    from partition_layer.client import PartitionClient
    pc = PartitionClient.from_stamp(data_dir)
    first = pc.append(account, log, [b"r1", b"r2"], token=None)  # -> int, first seq
    pc.read(account, log, from_seq, limit) -> list[tuple[int, bytes]]
    for seq, data in pc.subscribe(account, log, from_seq): ...
    pc.trim(account, log, upto_seq); pc.seal(account, log)
    pc.peek(account, log) -> tuple[int, int]                    # (first_seq, next_seq)
    etag = pc.put(account, pname, row, value, if_match=None, if_none_match=None)
    value, etag = pc.get(account, pname, row)
    pc.delete(account, pname, row, if_match=None)
    pc.batch(account, pname, [("put", row, value), ("delete", row), ...])
    pc.scan(account, start, end, limit)  # keys as (pname, row) tuples; within one partition
    for (pname, row), value in pc.scan_all(account, start, end, limit): ...  # across them
    for log in pc.list_logs(account, prefix=""): ...  # log names in order, across them

Routing: each call goes to the server the cached map names for its partition name; a "not
the owner" answer (or an unreachable server) refreshes the map from a PM and retries, until
`client_timeout_ms`. Only what is safe to repeat is retried after an ambiguous failure (the
server may have executed it): appends always carry a token — the caller's, or one made here —
so a retried append is applied once; so do puts, deletes and batches (one made here), so a
retry is answered from the first attempt's outcome and never undoes a later write. Reads,
trims and seals are safe to repeat as they are (a trim or seal only moves forward). Errors are
the typed exceptions of common/errors.py.

End-to-end checksums (§5, §8 invariant 6): what is sent carries a CRC32C per record and value;
what is read is checked against the CRC stored with it: ChecksumError, never wrong bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import grpc

from common import rpc
from common.config import PartitionLimits, load_config
from common.deadline import remaining_s
from common.errors import (
    DeadlineExceeded,
    InvalidArgument,
    NotOwner,
    StampError,
    Throttled,
    Unavailable,
)
from common.loop_thread import LoopThread
from common.proto import partition_pb2 as pb
from common.proto import partition_pb2_grpc as pb_grpc
from common.retry import AttemptTimer, RetryPolicy
from common.stamp_file import addresses_of, read_stamp
from partition_layer import keys, scan_client
from partition_layer.client_requests import (
    Row,
    batch_request,
    check_seq,
    delete_request,
    put_request,
    row_bytes,
    scan_key,
)
from partition_layer.operations import entity_key
from partition_layer.partition_map import PartitionMap
from partition_layer.payload_crc import payload_crcs, verify_records, verify_value
from partition_layer.requests import route_key
from partition_layer.session import CallSession

T = TypeVar("T")
TOKEN_PREFIX_BYTES = 12  # 96 random bits: no two clients share a prefix
RETRY_BACKOFF_MIN_S = 0.02
# Each retry after NotOwner or an unreachable server fetches the map again: at this pace at
# most (common/retry.py's policy, jittered), so a failover's end (the partition's new owner
# in the map) is seen within it.
RETRY_POLICY = RetryPolicy(backoff_min_s=RETRY_BACKOFF_MIN_S, backoff_max_s=0.1)
# An attempt unanswered this long has the map fetched again (at most this often per
# client): if the map now sends its key elsewhere (its server died or froze, and the
# partition moved), an idempotent attempt is left for the new owner at once rather than
# waited out at a server that may never answer (issue 29).
MAP_WATCH_S = 0.25
# A map fetch waits this long for the partition managers (asked all at once: a frozen one
# costs nothing while another answers).
GET_MAP_TIMEOUT_S = 2.0
SUBSCRIBE_ATTEMPT_S = 3600.0


class AsyncPartitionClient:
    def __init__(self, pm_addresses: Sequence[str], limits: PartitionLimits | None = None,
                 on_pressure: Callable[[pb.ServerPressure], None] | None = None) -> None:
        if not pm_addresses:
            raise InvalidArgument("a partition client needs partition manager addresses")
        self.limits = limits or PartitionLimits()
        # Called with each partition server's load report as its responses arrive (a front
        # end feeds them to its throttle: frontend/throttle.AccountThrottle.observe_server).
        self.on_pressure = on_pressure
        self.pm_addresses = list(pm_addresses)
        self._channels = rpc.ChannelCache(self.limits.rpc_message_bytes_max)
        self._sessions: dict[str, CallSession] = {}
        self.map: PartitionMap | None = None
        self.addresses: dict[str, str] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._map_fetched_at = 0.0  # monotonic, of the last fetch begun (`_watch_map`)
        # Automatic mutation tokens: this client's random prefix and a counter (unique without
        # a uuid4 per append, whose urandom call cost a fifth of a small append's time here).
        self._token_prefix = os.urandom(TOKEN_PREFIX_BYTES).hex()
        self._tokens = itertools.count()
        # How long an attempt at a partition server waits (common/retry.py): a frozen owner
        # costs about a second before the map is fetched again, not 10 s.
        self.attempts = AttemptTimer()
        self._rng = random.Random()

    # ---- the map ----------------------------------------------------------------------------

    async def refresh_map(self) -> None:
        """Fetch the map from any PM; concurrent callers share one fetch."""
        if self._refresh is None:
            self._map_fetched_at = time.monotonic()
            self._refresh = asyncio.get_running_loop().create_task(self._fetch_map())
        task = self._refresh
        try:
            await asyncio.shield(task)
        finally:
            if self._refresh is task and task.done():
                self._refresh = None

    async def _fetch_map(self) -> None:
        """The map from the first partition manager to answer, all asked at once (one
        frozen or slow manager must not hold every fetch for its timeout)."""
        asks = [asyncio.ensure_future(self._get_map(address)) for address in self.pm_addresses]
        last: BaseException | None = None
        try:
            for done in asyncio.as_completed(asks):
                try:
                    fresh, addresses = await done
                except StampError as exc:
                    last = exc
                    continue
                if self.map is None or fresh.version >= self.map.version:
                    self.map, self.addresses = fresh, addresses
                return
        finally:
            for ask in asks:
                ask.cancel()
        raise Unavailable(f"no partition manager answered: {last}")

    async def _get_map(self, address: str) -> tuple[PartitionMap, dict[str, str]]:
        stub = pb_grpc.PartitionManagerStub(self._channels.get(address))
        reply = await rpc.call(stub.GetMap(pb.GetMapRequest(), timeout=GET_MAP_TIMEOUT_S))
        return PartitionMap.from_pb(reply)

    async def partition_map(self) -> tuple[PartitionMap, dict[str, str]]:
        await self.refresh_map()
        assert self.map is not None
        return self.map, dict(self.addresses)

    async def wait_served(self, timeout_s: float) -> None:
        """Until every partition is served: each named server loaded and answers for it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                current, addresses = await self.partition_map()
                if all(p.server in addresses for p in current.partitions):
                    served = set()
                    for address in set(addresses.values()):
                        stub = pb_grpc.PartitionServerStub(self._channels.get(address))
                        load = await rpc.call(stub.Status(pb.ServerStatusRequest(), timeout=2))
                        served |= {p.partition_id for p in load.partitions
                                   if p.state == "serving"}
                    if {p.id for p in current.partitions} <= served:
                        return
            except StampError:
                pass
            if time.monotonic() > deadline:
                raise Unavailable(f"the partitions were not all served within {timeout_s:g}s")
            await asyncio.sleep(0.05)

    def _session(self, address: str) -> CallSession:
        session = self._sessions.get(address)
        if session is None:
            session = CallSession(address,
                                  lambda: pb_grpc.PartitionServerStub(self._channels.get(address)),
                                  self._pressure)
            self._sessions[address] = session
        return session

    def _pressure(self, report: pb.ServerPressure) -> None:
        if self.on_pressure is not None:
            self.on_pressure(report)

    async def _address_for(self, key: bytes) -> str:
        if self.map is None:
            await self.refresh_map()
        assert self.map is not None
        entry = self.map.lookup(key)
        address = self.addresses.get(entry.server)
        if address is None:
            raise NotOwner(f"partition {entry.id} has no live server yet")
        return address

    # ---- calls ------------------------------------------------------------------------------

    async def call(self, request: pb.Request, idempotent: bool, nbytes: int = 256
                   ) -> pb.Response:
        """Send `request` to the owner of its partition name, following map changes; retry
        ambiguous failures only if `idempotent`."""
        key = route_key(request.account, request.pname) if request.pname else \
            scan_key(request)
        deadline = time.monotonic() + self.limits.client_timeout_ms / 1000
        caller_s = remaining_s(request, time.time())  # a front end's caller gives up then
        if caller_s is not None:
            deadline = min(deadline, time.monotonic() + caller_s)
        attempt = 0
        while True:
            try:
                address = await self._address_for(key)
                sent = time.monotonic()
                response = await self._attempt(
                    key, address, request, min(self.attempts.timeout_s(attempt, nbytes),
                                               max(0.1, deadline - sent)), nbytes, idempotent)
                if response is None:  # the map moved the key on meanwhile: follow it now
                    if time.monotonic() > deadline:
                        raise DeadlineExceeded(f"{address} did not answer and the "
                                               f"partition moved; out of time")
                    continue
                self.attempts.observe(time.monotonic() - sent)
                if not response.error:
                    return response
                error = rpc.error_from_name(response.error, response.message)
                if isinstance(error, Throttled):
                    error.retry_after_s = response.retry_after_s
                raise error
            except (Unavailable, DeadlineExceeded, Throttled) as exc:
                # NotOwner (an Unavailable) and Throttled were not executed there: always
                # safe to retry; another failure may have been, so only if `idempotent`.
                safe = idempotent or isinstance(exc, (NotOwner, Throttled))
                delay = RETRY_POLICY.delay(exc, attempt, True, self._rng) if safe else None
                if delay is None or time.monotonic() + delay > deadline:
                    raise
                refetch = not isinstance(exc, Throttled)  # the owner may have moved
            await asyncio.sleep(delay)
            attempt += 1
            if refetch:
                await self.refresh_map()

    async def _attempt(self, key: bytes, address: str, request: pb.Request, timeout_s: float,
                       nbytes: int, idempotent: bool) -> pb.Response | None:
        """One attempt at `address`: its Response (or the session's error), or None if,
        while it went unanswered, the map came to send `key` elsewhere (MAP_WATCH_S; only
        when `idempotent`: the abandoned attempt may still run, and a retry is harmless)."""
        future = self._session(address).submit(request, timeout_s, nbytes)
        if not idempotent:
            return await future
        try:
            while True:
                done, _ = await asyncio.wait({future}, timeout=MAP_WATCH_S)
                if done:
                    return future.result()
                await self._watch_map()
                if self._route(key) != address:
                    return None
        finally:
            future.cancel()  # a no-op once answered; else the session forgets it

    async def _watch_map(self) -> None:
        """Fetch the map again unless a fetch began less than MAP_WATCH_S ago (the attempts
        waiting on a frozen server share one every MAP_WATCH_S)."""
        if time.monotonic() - self._map_fetched_at >= MAP_WATCH_S:
            with contextlib.suppress(StampError):
                await self.refresh_map()

    def _route(self, key: bytes) -> str | None:
        """The address the cached map sends `key` to (None: no live server)."""
        assert self.map is not None
        return self.addresses.get(self.map.lookup(key).server)

    # ---- logs -------------------------------------------------------------------------------

    async def append(self, account: str, log: str, records: Sequence[bytes],
                     token: str | None = None) -> int:
        records = [r if type(r) is bytes else bytes(r) for r in records]
        request = pb.Request(account=account, pname=log, append=pb.AppendOp(
            records=records, crcs=payload_crcs(records), token=token or self._token()))
        nbytes = sum(len(r) + 4 for r in records) + 128
        return (await self.call(request, idempotent=True, nbytes=nbytes)).first_seq

    def _token(self) -> str:
        """A token no other call of any client uses."""
        return f"{self._token_prefix}-{next(self._tokens)}"

    async def read(self, account: str, log: str, from_seq: int, limit: int
                   ) -> list[tuple[int, bytes]]:
        if limit <= 0:
            raise InvalidArgument("a read's limit is positive")
        request = pb.Request(account=account, pname=log,
                             read=pb.ReadOp(from_seq=check_seq("from_seq", from_seq),
                                            limit=min(limit, 2**32 - 1)))
        response = await self.call(request, idempotent=True)
        return verify_records(response.records, f"log {log!r}")

    async def trim(self, account: str, log: str, upto_seq: int) -> None:
        await self.call(pb.Request(account=account, pname=log,
                                   trim=pb.TrimOp(upto_seq=check_seq("upto_seq", upto_seq))),
                        idempotent=True)

    async def seal(self, account: str, log: str) -> None:
        await self.call(pb.Request(account=account, pname=log, seal=pb.Empty()),
                        idempotent=True)

    async def peek(self, account: str, log: str) -> tuple[int, int]:
        response = await self.call(pb.Request(account=account, pname=log, peek=pb.Empty()),
                                   idempotent=True)
        return response.first_seq, response.next_seq

    async def subscribe(self, account: str, log: str, from_seq: int
                        ) -> AsyncIterator[tuple[int, bytes]]:
        """Records from `from_seq` on as they commit, across partition moves; ends when the
        log is sealed and every record was delivered."""
        replies = self.subscribe_replies(account, log, check_seq("from_seq", from_seq))
        async with contextlib.aclosing(replies):
            async for reply in replies:
                for record in verify_records(reply.records, f"log {log!r}"):
                    yield record

    async def subscribe_replies(self, account: str, log: str, from_seq: int
                                ) -> AsyncIterator[pb.SubscribeReply]:
        """`subscribe` as whole SubscribeReplies, records untouched with their CRC32Cs (a
        front end relays them for the SDK to verify end to end): none before `from_seq`,
        none empty. A broken stream is resumed at the next sequence number on the log's
        server, the map refreshed, until `client_timeout_ms` passes without a reply."""
        next_seq = from_seq
        key = route_key(account, log)
        timeout_s = self.limits.client_timeout_ms / 1000
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                address = await self._address_for(key)
                stub = pb_grpc.PartitionServerStub(self._channels.get(address))
                stream = stub.Subscribe(pb.SubscribeRequest(
                    account=account, pname=log, from_seq=next_seq),
                    timeout=SUBSCRIBE_ATTEMPT_S)
                try:
                    async for reply in stream:
                        if reply.records and reply.records[0].seq < next_seq:
                            # A retry after a move may start earlier than asked: skip those.
                            fresh = [r for r in reply.records if r.seq >= next_seq]
                            del reply.records[:]
                            reply.records.extend(fresh)
                        if reply.records:
                            next_seq = reply.records[-1].seq + 1
                            yield reply
                        deadline = time.monotonic() + timeout_s
                    return
                except grpc.RpcError as exc:
                    raise rpc.from_rpc_error(exc) from None
                finally:
                    stream.cancel()
            except (NotOwner, Unavailable, DeadlineExceeded):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(RETRY_BACKOFF_MIN_S)
                await self.refresh_map()

    # ---- entities ---------------------------------------------------------------------------

    async def put(self, account: str, pname: str, row: Row, value: bytes,
                  if_match: str | None = None, if_none_match: str | None = None) -> str:
        request = put_request(account, pname, row, value, if_match, if_none_match,
                              self._token())
        return (await self.call(request, idempotent=True, nbytes=len(value) + 256)).etag

    async def get(self, account: str, pname: str, row: Row) -> tuple[bytes, str]:
        response = await self.call(pb.Request(account=account, pname=pname,
                                              get=pb.GetOp(row=row_bytes(row))),
                                   idempotent=True)
        value = verify_value(response.value, response.value_crc,
                             f"the value of row {row!r} in {pname!r}")
        return value, response.etag

    async def delete(self, account: str, pname: str, row: Row,
                     if_match: str | None = None) -> None:
        await self.call(delete_request(account, pname, row, if_match, self._token()),
                        idempotent=True)

    async def batch(self, account: str, pname: str, ops: Sequence[tuple[Any, ...]]
                    ) -> list[str]:
        request = batch_request(account, pname, ops, self._token())
        response = await self.call(request, idempotent=True, nbytes=sum(
            len(i.value) + 64 for i in request.batch.items) + 128)
        return list(response.etags)

    async def scan(self, account: str, start: tuple[str, Row] | None = None,
                   end: tuple[str, Row] | None = None, limit: int = 1000
                   ) -> list[tuple[tuple[str, bytes], bytes]]:
        op = pb.ScanOp(limit=limit)
        if start is not None:
            op.start_pname, op.start_row = start[0], row_bytes(start[1])
        if end is not None:
            op.has_end, op.end_pname, op.end_row = True, end[0], row_bytes(end[1])
        response = await self.call(pb.Request(account=account, scan=op), idempotent=True)
        return [((i.pname, i.row),
                 verify_value(i.value, i.crc, f"the value of row {i.row!r} in {i.pname!r}"))
                for i in response.items]

    async def scan_all(self, account: str, start: tuple[str, Row] | None = None,
                       end: tuple[str, Row] | None = None, limit: int = 0
                       ) -> AsyncIterator[tuple[tuple[str, bytes], bytes]]:
        """Entities of `account` in key order across range partitions, from `start` (pname,
        row) up to `end`, at most `limit` (0: all); one snapshot per partition's part
        (scan_client.py). ChecksumError if a value does not match its stored CRC32C."""
        start_key = b"" if start is None else entity_key(account, start[0],
                                                         row_bytes(start[1]))
        end_key = None if end is None else entity_key(account, end[0], row_bytes(end[1]))
        async for page in scan_client.scan(self, account, start_key, end_key, limit=limit):
            for item in page.items:
                yield (item.pname, item.row), verify_value(
                    item.value, item.crc, f"the value of row {item.row!r} in {item.pname!r}")

    async def list_logs(self, account: str, prefix: str = "") -> AsyncIterator[str]:
        """The names of `account`'s logs that start with `prefix`, in name order, across
        range partitions."""
        low, high = keys.name_range(account, prefix)
        async for page in scan_client.scan(self, account, low, high, pb.SCAN_LOG_NAMES):
            for item in page.items:
                yield item.pname

    async def address_for(self, key: bytes) -> str:
        """The address of the server the cached map names for `key` (NotOwner: none yet)."""
        return await self._address_for(key)

    def scan_stream(self, address: str, request: pb.PartitionScanRequest
                    ) -> AsyncIterator[pb.PartitionScanPage]:
        """The pages of a PS Scan stream on this client's channel to `address`."""
        stub = pb_grpc.PartitionServerStub(self._channels.get(address))
        return scan_client.open_grpc_stream(stub, request)

    async def close(self) -> None:
        for session in self._sessions.values():
            await session.close()
        await self._channels.close()


class PartitionClient:
    """Blocking, thread-safe facade over AsyncPartitionClient (a private event loop)."""

    def __init__(self, pm_addresses: Sequence[str], limits: PartitionLimits | None = None
                 ) -> None:
        self._loop = LoopThread("partition-client")
        self.aio: AsyncPartitionClient = self.run(_make(pm_addresses, limits))

    @classmethod
    def from_stamp(cls, data_dir: str) -> PartitionClient:
        config = load_config(read_stamp(data_dir).get("config"))
        return cls(addresses_of(data_dir, "partition-manager"), config.partition)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def append(self, account: str, log: str, records: Sequence[bytes],
               token: str | None = None) -> int:
        return self.run(self.aio.append(account, log, records, token))

    def read(self, account: str, log: str, from_seq: int, limit: int
             ) -> list[tuple[int, bytes]]:
        return self.run(self.aio.read(account, log, from_seq, limit))

    def subscribe(self, account: str, log: str, from_seq: int
                  ) -> Iterator[tuple[int, bytes]]:
        return self._iterate(self.aio.subscribe(account, log, from_seq))

    def trim(self, account: str, log: str, upto_seq: int) -> None:
        self.run(self.aio.trim(account, log, upto_seq))

    def seal(self, account: str, log: str) -> None:
        self.run(self.aio.seal(account, log))

    def peek(self, account: str, log: str) -> tuple[int, int]:
        return self.run(self.aio.peek(account, log))

    def put(self, account: str, pname: str, row: Row, value: bytes,
            if_match: str | None = None, if_none_match: str | None = None) -> str:
        return self.run(self.aio.put(account, pname, row, value, if_match, if_none_match))

    def get(self, account: str, pname: str, row: Row) -> tuple[bytes, str]:
        return self.run(self.aio.get(account, pname, row))

    def delete(self, account: str, pname: str, row: Row, if_match: str | None = None) -> None:
        self.run(self.aio.delete(account, pname, row, if_match))

    def batch(self, account: str, pname: str, ops: Sequence[tuple[Any, ...]]) -> list[str]:
        return self.run(self.aio.batch(account, pname, ops))

    def scan(self, account: str, start: tuple[str, Row] | None = None,
             end: tuple[str, Row] | None = None, limit: int = 1000
             ) -> list[tuple[tuple[str, bytes], bytes]]:
        return self.run(self.aio.scan(account, start, end, limit))

    def scan_all(self, account: str, start: tuple[str, Row] | None = None,
                 end: tuple[str, Row] | None = None, limit: int = 0
                 ) -> Iterator[tuple[tuple[str, bytes], bytes]]:
        return self._iterate(self.aio.scan_all(account, start, end, limit))

    def list_logs(self, account: str, prefix: str = "") -> Iterator[str]:
        return self._iterate(self.aio.list_logs(account, prefix))

    def _iterate(self, iterable: AsyncIterator[T]) -> Iterator[T]:
        """`iterable`, run on the client's loop an item at a time."""
        iterator = iterable.__aiter__()
        try:
            while True:
                try:
                    yield self.run(iterator.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            if not self._loop.closed:
                # The client may be closing under us (a daemon thread following a log).
                with contextlib.suppress(Exception):
                    self.run(iterator.aclose())  # type: ignore[attr-defined]

    def partition_map(self) -> tuple[PartitionMap, dict[str, str]]:
        return self.run(self.aio.partition_map())

    def wait_served(self, timeout_s: float = 30.0) -> None:
        self.run(self.aio.wait_served(timeout_s))

    def close(self) -> None:
        if not self._loop.closed:
            self.run(self.aio.close())
            self._loop.close()

    def __enter__(self) -> PartitionClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _make(pm_addresses: Sequence[str], limits: PartitionLimits | None
                ) -> AsyncPartitionClient:
    return AsyncPartitionClient(pm_addresses, limits)
