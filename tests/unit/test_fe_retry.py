"""frontend/server_call.FrontEnd's forwarding on a fake partition layer: a request whose
attempt broke with the stream (it may or may not have run) is retried through the client only
if a repeat is harmless — a read, or a mutation carrying its token — and a "not the owner"
answer (not run) is always retried after a map refresh; the SDK's id is on every answer."""

from __future__ import annotations

import asyncio
import random

from common.clock import ManualClock
from common.config import FrontEndLimits, PartitionLimits
from common.errors import NotOwner, Unavailable
from common.proto import partition_pb2 as pb
from common.retry import AttemptTimer
from frontend import wire
from frontend.auth import Authenticator
from frontend.server_call import FrontEnd, retry_safe
from frontend.throttle import AccountThrottle
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import Waiter

KEY = b"k" * 32


class FailingSession:
    """Every first attempt fails: the stream broke, or the server was not the owner."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome

    def send(self, request: pb.Request, timeout_s: float, nbytes: int, waiter: Waiter) -> int:
        if self.outcome == "broken":
            waiter.set_exception(Unavailable("stream to ps-1 broke"))
        else:
            waiter.set_result(pb.Response(id=request.id, error=NotOwner.__name__))
        return request.id


class RetryingClient:
    def __init__(self, outcome: str) -> None:
        self.session_ = FailingSession(outcome)
        self.attempts = AttemptTimer()
        self.retried: list[tuple[pb.Request, bool]] = []
        self.refreshes = 0

    def route(self, key: bytes) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def route_name(self, account: str, pname: str) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def session(self, address: str) -> FailingSession:
        return self.session_

    async def refresh_map(self) -> None:
        self.refreshes += 1

    async def call(self, request: pb.Request, idempotent: bool, nbytes: int) -> pb.Response:
        self.retried.append((request, idempotent))
        return pb.Response(id=77, etag="e1")


def put(token: str, clock: ManualClock) -> pb.Request:
    request = pb.Request(id=5, account="acme", pname="users", token=token, put=pb.PutOp(
        row=b"r", value=b"v", value_crc=payload_crcs([b"v"])[0]))
    wire.sign_call(request, wire.Credentials("acme", key=KEY), clock.wall())
    return request


async def forward(outcome: str, request: pb.Request, clock: ManualClock
                  ) -> tuple[pb.Response, RetryingClient]:
    auth = Authenticator(lambda account: (KEY, KEY), clock, ttl_s=10.0)
    copy = pb.Request()
    copy.CopyFrom(request)  # call_claim takes the credentials out of what it reads
    await auth.check(wire.call_claim(copy))
    client = RetryingClient(outcome)
    limits = FrontEndLimits()
    front_end = FrontEnd(auth, client, AccountThrottle(limits, clock, random.Random(1)),  # type: ignore[arg-type]
                         PartitionLimits(), limits)
    answered: asyncio.Future[pb.Response] = asyncio.get_running_loop().create_future()
    front_end.start(request, answered.set_result)
    return await asyncio.wait_for(answered, 5), client


def test_a_broken_attempt_is_retried_only_when_a_repeat_is_harmless() -> None:
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        with_token, client = await forward("broken", put("t1", clock), clock)
        assert (with_token.id, with_token.etag, with_token.error) == (5, "e1", "")
        assert [idempotent for _, idempotent in client.retried] == [True]
        assert client.refreshes == 1
        without, client = await forward("broken", put("", clock), clock)
        assert (without.id, without.error) == (5, "Unavailable")  # maybe run: not repeated
        assert client.retried == []
        not_owner, client = await forward("not owner", put("", clock), clock)
        assert (not_owner.id, not_owner.etag) == (5, "e1")  # not run there: always retried
        assert [idempotent for _, idempotent in client.retried] == [False]
    asyncio.run(scenario())


def test_what_is_safe_to_repeat() -> None:
    assert retry_safe(pb.Request(read=pb.ReadOp()))
    assert retry_safe(pb.Request(seal=pb.Empty()))
    assert retry_safe(pb.Request(append=pb.AppendOp(token="t")))
    assert not retry_safe(pb.Request(append=pb.AppendOp()))
    assert retry_safe(pb.Request(token="t", delete=pb.DeleteOp()))
    assert not retry_safe(pb.Request(batch=pb.BatchOp()))
