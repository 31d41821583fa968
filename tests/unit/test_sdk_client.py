"""The SDK client's call loop (stampsdk/aio.py) over a scripted in-memory session: signing
at send time (verified as a front end does: the public protocol's bytes read by
frontend/public_protocol.py, checked by frontend/wire.py), retries, failover, tokens,
read-side checksums, a closed client. The network side is covered by tests/probe/test_sdk.py
against real front ends."""

from __future__ import annotations

import asyncio
import base64
import random
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from stampsdk import aio, client, connection_string
from stampsdk import requests as sdk_requests
from stampsdk._proto import frontend_v1_pb2 as pb
from stampsdk.checksums import crc32c
from stampsdk.errors import (
    ChecksumError,
    InvalidArgument,
    PreconditionFailed,
    StampError,
    Unavailable,
)
from stampsdk.limits import Limits as SdkLimits
from stampsdk.retry import RetryPolicy

from common.clock import ManualClock
from common.config import PartitionLimits
from frontend import public_protocol, wire

KEY = bytes(range(32))
ENDPOINTS = ["127.0.0.1:1", "127.0.0.1:2"]
Script = Callable[[str, pb.Request], pb.Response]


class ScriptedSession:
    """Answers each call with `script(endpoint, request)` (which may raise), keeping a copy
    of every request as it was sent; every call moves the clock on by `step_s`."""

    def __init__(self, endpoint: str, script: Script, sent: list[tuple[str, pb.Request]],
                 clock: ManualClock, step_s: float) -> None:
        self.endpoint, self.script, self.sent = endpoint, script, sent
        self.clock, self.step_s = clock, step_s

    def submit(self, request: pb.Request, timeout_s: float, nbytes: int = 256
               ) -> asyncio.Future[pb.Response]:
        copy = pb.Request()
        copy.CopyFrom(request)
        self.sent.append((self.endpoint, copy))
        self.clock.advance(self.step_s)
        future: asyncio.Future[pb.Response] = asyncio.get_running_loop().create_future()
        try:
            future.set_result(self.script(self.endpoint, copy))
        except StampError as exc:
            future.set_exception(exc)
        return future

    async def close(self) -> None:
        pass


def make(script: Script, step_s: float = 1.0, timeout_s: float = 30.0
         ) -> tuple[aio.Client, list[tuple[str, pb.Request]], ManualClock]:
    clock = ManualClock(time.time())
    sent: list[tuple[str, pb.Request]] = []
    c = aio.Client(ENDPOINTS, "acct", key=KEY, timeout_s=timeout_s,
                   limits=PartitionLimits(record_bytes_max=10, batch_ops_max=2),
                   policy=RetryPolicy(0.001, 0.002), clock=clock, rng=random.Random(0))
    for endpoint in ENDPOINTS:
        c._sessions[endpoint, False] = ScriptedSession(  # type: ignore[assignment]
            endpoint, script, sent, clock, step_s)
    return c, sent, clock


def verified(request: pb.Request, now_s: float) -> None:
    """As a front end's public door takes the request: its bytes read as the internal
    message, then authenticated."""
    data = pb.RequestBatch(requests=[request]).SerializeToString()
    (internal,) = public_protocol.read_request_batch(data).requests
    wire.authenticate(wire.call_claim(internal), keys_of=lambda a: [KEY] if a == "acct"
                      else None, now_s=now_s)


def test_a_retry_goes_to_another_front_end_signed_afresh_with_the_same_token() -> None:
    def script(endpoint: str, request: pb.Request) -> pb.Response:
        if len(sent) == 1:
            raise Unavailable("stream broke")
        return pb.Response(first_seq=7)
    c, sent, clock = make(script)
    assert asyncio.run(c.append("orders", [b"a", b"b"])) == 7
    (first_ep, first), (second_ep, second) = sent
    assert first_ep != second_ep
    assert first.auth.timestamp_ms < second.auth.timestamp_ms
    assert first.append.token and first.append.token == second.append.token
    assert list(second.append.crcs) == [crc32c(b"a"), crc32c(b"b")]
    # Each attempt carries its own wait, under the signature: the second waits at least as
    # long as the first (stampsdk/retry.py AttemptTimer).
    assert 0 < first.timeout_ms <= second.timeout_ms <= 30_000
    for request in (first, second):
        verified(request, clock.wall())


def test_each_call_gets_its_own_token_and_a_given_one_is_kept() -> None:
    c, sent, _ = make(lambda e, r: pb.Response(first_seq=1, etag="x"))

    async def run() -> None:
        await c.append("orders", [b"a"])
        await c.append("orders", [b"a"])
        await c.append("orders", [b"a"], token="mine")
        await c.put("things", "row", b"v")
        await c.delete("things", "row")
    asyncio.run(run())
    tokens = [r.append.token or r.token for _, r in sent]
    assert tokens[2] == "mine"
    assert len(set(tokens)) == 5 and all(tokens)


def test_a_final_error_is_raised_at_once() -> None:
    c, sent, _ = make(lambda e, r: pb.Response(error="PreconditionFailed", message="etag"))
    with pytest.raises(PreconditionFailed, match="etag"):
        asyncio.run(c.put("things", "row", b"v", if_match="x"))
    assert len(sent) == 1


def test_throttled_is_retried_and_unavailable_until_the_timeout() -> None:
    answers = iter([pb.Response(error="Throttled", retry_after_s=0.001),
                    pb.Response(error="NotOwner"), pb.Response(etag="e")])
    c, sent, _ = make(lambda e, r: next(answers))
    assert asyncio.run(c.put("things", "row", b"v")) == "e"
    assert len(sent) == 3

    def down(endpoint: str, request: pb.Request) -> pb.Response:
        raise Unavailable(f"{endpoint} is down")
    c, sent, _ = make(down, step_s=1.0, timeout_s=5.0)
    with pytest.raises(Unavailable, match="is down"):
        asyncio.run(c.peek("orders"))
    assert 4 <= len(sent) <= 6
    assert {e for e, _ in sent} == set(ENDPOINTS)


def test_reads_are_checked_against_their_crc() -> None:
    good = pb.Record(seq=3, data=b"abc", crc=crc32c(b"abc"))
    bad = pb.Record(seq=4, data=b"abd", crc=crc32c(b"abc"))
    c, _, _ = make(lambda e, r: pb.Response(records=[good]))
    assert asyncio.run(c.read("orders", 3)) == [(3, b"abc")]
    c, _, _ = make(lambda e, r: pb.Response(records=[good, bad]))
    with pytest.raises(ChecksumError):
        asyncio.run(c.read("orders", 3))
    c, _, _ = make(lambda e, r: pb.Response(value=b"xyz", value_crc=crc32c(b"xyw"), etag="e"))
    with pytest.raises(ChecksumError):
        asyncio.run(c.get("things", "row"))


def test_bad_arguments_never_reach_a_front_end() -> None:
    c, sent, _ = make(lambda e, r: pb.Response())
    bad_calls = [
        (c.append("Orders", [b"a"]), "log name"),
        (c.append("orders", [b"x" * 11]), "record_bytes_max"),
        (c.append("orders", []), "at least one record"),
        (c.append("orders", "abc"), "sequence"),  # type: ignore[arg-type]
        (c.append("orders", ["abc"]), "bytes"),  # type: ignore[list-item]
        (c.append("orders", [b"a"], token=""), "token"),
        (c.read("orders", -1), "from_seq"),
        (c.read("orders", 0, 0), "limit"),
        (c.trim("orders", 2**64), "upto_seq"),
        (c.put("things", b"", b"v"), "row_bytes_max"),
        (c.put("things", "r", "v"), "bytes"),  # type: ignore[arg-type]
        (c.put("things", "r", b"v", if_none_match="x"), "if_none_match"),
        (c.put("things", "r", b"v", if_match="e", if_none_match="*"), "exclude"),
        (c.batch("things", [("put", "a", b"1")] * 3), "batch_ops_max"),
        (c.batch("things", [("upsert", "a")]), "batch operation"),
        (c.get("t", "r"), "partition name"),
    ]
    for coro, match in bad_calls:
        with pytest.raises(InvalidArgument, match=match):
            asyncio.run(coro)
    for call, match in [(lambda: c.subscribe("x"), "log name"),
                        (lambda: c.subscribe("orders", -5), "from_seq"),
                        (lambda: c.list_logs("-x"), "prefix"),
                        (lambda: c.scan(limit=0), "limit")]:
        with pytest.raises(InvalidArgument, match=match):
            call()
    assert sent == []


@pytest.mark.parametrize("kwargs, match", [
    ({"key": KEY, "sas": "x"}, "exactly one"),
    ({}, "exactly one"),
    ({"key": b"short"}, "Key"),
    ({"key": KEY, "timeout_s": 0}, "timeout_s"),
    ({"key": KEY, "timeout_s": float("nan")}, "timeout_s"),
])
def test_bad_client_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidArgument, match=match):
        aio.Client(ENDPOINTS, "acct", **kwargs)
    with pytest.raises(InvalidArgument):
        aio.Client("127.0.0.1:1", "acct", key=KEY)
    with pytest.raises(InvalidArgument, match="account"):
        aio.Client(ENDPOINTS, "A", key=KEY)
    with pytest.raises(InvalidArgument, match="endpoint"):
        aio.Client(["nohost"], "acct", key=KEY)


def test_a_closed_client_says_so() -> None:
    c, sent, _ = make(lambda e, r: pb.Response())
    asyncio.run(c.close())
    with pytest.raises(InvalidArgument, match="closed"):
        asyncio.run(c.peek("orders"))
    with pytest.raises(InvalidArgument, match="closed"):
        c.scan()
    text = connection_string.make(ENDPOINTS, "acct", key=KEY).format()
    with client.Client.from_connection_string(text, timeout_s=1.0) as blocking:
        assert blocking.account == "acct"
    with pytest.raises(InvalidArgument, match="closed"):
        blocking.peek("orders")
    with pytest.raises(InvalidArgument, match="closed"):
        blocking.scan()
    assert sent == []


def test_the_blocking_client_reports_errors_as_the_async_one() -> None:
    with client.Client(["127.0.0.1:1"], "acct", key=KEY, timeout_s=0.5) as c:
        with pytest.raises(InvalidArgument, match="log name"):
            c.append("X", [b"a"])
        with pytest.raises(StampError):  # nothing listens on port 1
            c.peek("orders")


def test_the_blocking_scan_crosses_to_its_loop_once_a_page() -> None:
    from stampsdk.scan import AsyncScanIterator, ScanCursor, ScanRange

    from tests.support.scan_reference import ITEMS, KEYS, ReferenceFrontEnd

    with client.Client(["127.0.0.1:1"], "acct", key=KEY) as c:
        runs = []
        run = c._run

        def counted(coro):  # type: ignore[no-untyped-def]
            runs.append(coro)
            return run(coro)
        c._run = counted  # type: ignore[method-assign]
        source = ReferenceFrontEnd(ITEMS, page_rows=4).source
        it = client.ScanIterator(c, AsyncScanIterator(ScanCursor("acct", ScanRange()), source,
                                                      None))
        head = [next(it) for _ in range(5)]
        token = it.continuation
        rest = list(it)
        assert [(e.pname, e.row) for e in head + rest] == KEYS
        assert len(runs) <= len(KEYS) // 4 + 2  # a page at a time, not an item
        resumed = client.ScanIterator(c, AsyncScanIterator(
            ScanCursor("acct", ScanRange(), continuation=token), source, token))
        assert [(e.pname, e.row) for e in resumed] == KEYS[5:]


def test_a_scan_left_by_its_with_block_is_closed() -> None:
    from stampsdk.scan import AsyncScanIterator, ScanCursor, ScanRange

    from tests.support.scan_reference import ITEMS, ReferenceFrontEnd

    source = ReferenceFrontEnd(ITEMS, page_rows=4).source
    with client.Client(["127.0.0.1:1"], "acct", key=KEY) as c:
        with client.ScanIterator(c, AsyncScanIterator(ScanCursor("acct", ScanRange()), source,
                                                      None)) as it:
            next(it)
            assert it._it._batches.ag_frame is not None  # the stream is open mid-scan
        assert it._it._batches.ag_frame is None

    async def scanned() -> None:
        async with AsyncScanIterator(ScanCursor("acct", ScanRange()), source, None) as scan:
            await scan.__anext__()
        assert scan._batches.ag_frame is None
    asyncio.run(scanned())


def test_closing_while_other_threads_call_ends_every_call_with_a_stamp_error() -> None:
    """Calls in flight on other threads (retrying an unreachable front end) when the client
    is closed end at once, each with InvalidArgument('... closed'): none hangs on the stopped
    loop nor raises anything else. Repeated, closing after a growing number of failed calls, to
    meet the callers at different steps."""
    for round_ in range(8):
        c = client.Client(["127.0.0.1:1"], "acct", key=KEY, timeout_s=0.2)
        outcomes: list[BaseException] = []
        failures = threading.Semaphore(0)
        threads = [threading.Thread(target=_call_until_closed, args=(c, outcomes, failures),
                                    daemon=True) for _ in range(4)]
        for thread in threads:
            thread.start()
        for _ in range(round_):
            assert failures.acquire(timeout=30)
        started = time.monotonic()
        c.close()
        # Every call ended when the async client closed: none was left for close() to
        # cancel after waiting CLOSE_WAIT_S (a call queued in a session used to be).
        assert time.monotonic() - started < client.CLOSE_WAIT_S, f"round {round_}"
        for thread in threads:
            thread.join(timeout=20)
        assert not any(t.is_alive() for t in threads), f"round {round_}: a call hung"
        assert len(outcomes) == 4 and all(
            isinstance(o, InvalidArgument) and "closed" in str(o) for o in outcomes), \
            (round_, outcomes)


def _call_until_closed(c: client.Client, outcomes: list[BaseException],
                       failures: threading.Semaphore) -> None:
    while True:
        try:
            c.peek("orders")
        except InvalidArgument as exc:
            outcomes.append(exc)
            return
        except StampError:
            failures.release()
        except BaseException as exc:  # reported by the test thread
            outcomes.append(exc)
            return


def test_an_append_is_sized_without_reading_its_records_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading a message's records back copies each one (100 KiB for 100 records of 1 KiB,
    on every append): the SDK sizes an append from the caller's records instead."""
    def request_bytes(request: pb.Request) -> int:
        raise AssertionError("an append's records read back out of the message to size it")

    monkeypatch.setattr(sdk_requests, "request_bytes", request_bytes)
    c, _, _ = make(lambda e, r: pb.Response(first_seq=3))
    sizes: list[int] = []
    for session in c._sessions.values():
        submit = session.submit

        def sized(request: pb.Request, timeout_s: float, nbytes: int = 256,
                  submit: Callable[..., asyncio.Future[pb.Response]] = submit
                  ) -> asyncio.Future[pb.Response]:
            sizes.append(nbytes)
            return submit(request, timeout_s, nbytes)
        session.submit = sized  # type: ignore[method-assign]
    assert asyncio.run(c.append("orders", [b"abc", b"de"])) == 3
    assert sizes == [5 + 2 * 8 + 256]


def test_a_str_that_is_not_unicode_text_is_an_invalid_argument() -> None:
    """A lone surrogate cannot be encoded as UTF-8: a row key or token made of one is
    InvalidArgument naming the rule, never a UnicodeEncodeError (every error typed)."""
    c, sent, _ = make(lambda e, r: pb.Response())

    async def calls() -> None:
        with pytest.raises(InvalidArgument, match="row key"):
            await c.put("users", "\ud800", b"v")
        with pytest.raises(InvalidArgument, match="row key"):
            c.scan(start=("users", "a\udfff"))
        with pytest.raises(InvalidArgument, match="token"):
            await c.append("orders", [b"r"], token="\ud800")
        with pytest.raises(InvalidArgument, match="if_match"):
            await c.put("users", "r", b"v", if_match="\ud800")
        with pytest.raises(InvalidArgument, match="if_match"):
            await c.batch("users", [("delete", "r", "\ud800")])
        await c.close()
    asyncio.run(calls())
    assert sent == []


def test_both_clients_take_limits_and_a_policy_from_a_connection_string() -> None:
    text = "Endpoint=127.0.0.1:1;Account=acct;Key=" + base64.b64encode(bytes(32)).decode()
    small, patient = replace(SdkLimits(), record_bytes_max=10), RetryPolicy(backoff_max_s=7.0)
    with client.Client.from_connection_string(text, limits=small, policy=patient) as blocking:
        assert (blocking.aio.limits, blocking.aio._policy) == (small, patient)
        with pytest.raises(InvalidArgument, match="record_bytes_max"):
            blocking.append("log", [b"x" * 11])

    async def made() -> None:
        async with aio.Client.from_connection_string(text, limits=small,
                                                     policy=patient) as asynchronous:
            assert (asynchronous.limits, asynchronous._policy) == (small, patient)
    asyncio.run(made())
