"""frontend/server_call.FrontEnd with its throttle, on a fake partition layer: once a
partition server reports overload on its stream (`observe_pressure`), the account sending
most of its requests is refused (Throttled, with a retry-after) with a probability from its
share, while a quiet account's requests all go through; when the server recovers, nobody is
refused. Also: refused requests are never forwarded."""

from __future__ import annotations

import asyncio
import random

from common.clock import ManualClock
from common.config import FrontEndLimits, PartitionLimits
from common.proto import partition_pb2 as pb
from common.retry import AttemptTimer
from frontend import wire
from frontend.auth import Authenticator
from frontend.server_call import FrontEnd
from frontend.throttle import AccountThrottle
from partition_layer.payload_crc import payload_crcs
from partition_layer.session import Waiter

KEYS = {"noisy": (b"n" * 32, b"m" * 32), "quiet": (b"q" * 32, b"r" * 32)}


class FakeSession:
    def __init__(self) -> None:
        self.forwarded: list[pb.Request] = []

    def send(self, request: pb.Request, timeout_s: float, nbytes: int, waiter: Waiter) -> int:
        self.forwarded.append(request)
        waiter.set_result(pb.Response(id=999, first_seq=len(self.forwarded)))
        return 999


class FakeClient:
    """The part of frontend.forward.ForwardingClient FrontEnd's hot path uses."""

    def __init__(self) -> None:
        self.session_ = FakeSession()
        self.attempts = AttemptTimer()

    def route(self, key: bytes) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def route_name(self, account: str, pname: str) -> tuple[str, str]:
        return "ps-1", "127.0.0.1:1"

    def session(self, address: str) -> FakeSession:
        return self.session_


def request(account: str, i: int, clock: ManualClock) -> pb.Request:
    records = [b"r%d" % i]
    made = pb.Request(id=i, account=account, pname="log-1", append=pb.AppendOp(
        records=records, crcs=payload_crcs(records), token=f"t{i}"))
    wire.sign_call(made, wire.Credentials(account, key=KEYS[account][0]), clock.wall())
    return made


async def send(front_end: FrontEnd, requests: list[pb.Request]) -> dict[int, pb.Response]:
    answers: dict[int, pb.Response] = {}
    done = asyncio.Event()

    def reply(response: pb.Response) -> None:
        answers[response.id] = response
        if len(answers) == len(requests):
            done.set()

    for made in requests:
        front_end.start(made, reply)
    await asyncio.wait_for(done.wait(), 5)
    return answers


def test_an_overloaded_servers_top_talker_is_refused_and_a_quiet_account_is_not() -> None:
    async def scenario() -> None:
        clock = ManualClock(start=1_700_000_000.0)
        limits = FrontEndLimits(talker_sample_probability=1.0)
        auth = Authenticator(lambda account: KEYS.get(account), clock, ttl_s=10.0)
        client = FakeClient()
        front_end = FrontEnd(auth, client, AccountThrottle(limits, clock, random.Random(7)),  # type: ignore[arg-type]
                             PartitionLimits(), limits)
        for account in KEYS:  # keys cached: every request takes the hot path
            await auth.check(wire.call_claim(request(account, 0, clock)))
        calm = await send(front_end, [request("noisy", i, clock) for i in range(1, 51)])
        assert all(not r.error for r in calm.values())  # no report yet: nobody refused

        front_end.observe_pressure(pb.ServerPressure(server="ps-1", queue_ops=0,
                                                     p99_ms=limits.overload_p99_ms_min))
        mixed = [request("noisy", i, clock) for i in range(100, 500)]
        for i in range(20):
            mixed.insert(i * 20, request("quiet", 1000 + i, clock))
        forwarded_before = len(client.session_.forwarded)
        answers = await send(front_end, mixed)
        noisy = [answers[r.id] for r in mixed if r.account == "noisy"]
        quiet = [answers[r.id] for r in mixed if r.account == "quiet"]
        refused = [r for r in noisy if r.error == "Throttled"]
        assert all(not r.error for r in quiet)
        assert len(refused) >= len(noisy) // 2, len(refused)  # refused ~85% at a ~95% share
        assert all("overloaded" in r.message and r.retry_after_s > 0 for r in refused)
        assert len(client.session_.forwarded) - forwarded_before == len(mixed) - len(refused)
        assert all(not r.HasField("auth") for r in client.session_.forwarded)
        assert front_end.counters.throttled == len(refused)

        front_end.observe_pressure(pb.ServerPressure(server="ps-1", queue_ops=0, p99_ms=1.0))
        recovered = await send(front_end, [request("noisy", i, clock) for i in range(600, 700)])
        assert all(not r.error for r in recovered.values())
    asyncio.run(scenario())
