"""A partition server's heartbeat loop (partition_layer/ps_main.py `heartbeat_forever`) outlives
any error of a beat: were it to end, the PM would never learn that the server stopped
serving a partition it had confirmed, and clients would be sent there for ever."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import types

import pytest

from common.config import PartitionLimits
from common.errors import NotLeader, Unavailable
from common.proto import partition_pb2 as pb
from partition_layer import ps_main
from partition_layer.manager import PartitionManager

DEADLINE_S = 5.0


class _FlakyRegistration:
    """Fails its first calls with errors that are not StampErrors (a failed assertion in a
    lock client, as an unexpected reply would raise), then works."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.calls = 0

    def in_place(self) -> bool:
        return False  # every beat registers (and may fail)

    def ensure(self) -> None:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)


class _NoLeader:
    def get(self, key: str) -> None:
        return None  # no PM leads yet: nothing to send


async def _beats_after(failures: list[BaseException], wanted: int) -> int:
    registration = _FlakyRegistration(failures)
    limits = dataclasses.replace(PartitionLimits(), heartbeat_interval_ms=10)
    task = asyncio.get_running_loop().create_task(ps_main.heartbeat_forever(
        object(), registration, _NoLeader(), "127.0.0.1:1", limits))  # type: ignore[arg-type]
    try:
        deadline = time.monotonic() + DEADLINE_S
        while registration.calls < wanted and time.monotonic() < deadline \
                and not task.done():
            await asyncio.sleep(0.01)
        assert not task.done(), f"the heartbeat loop ended: {task.exception()!r}"
        return registration.calls
    finally:
        task.cancel()


def test_the_heartbeat_loop_goes_on_after_an_unexpected_error() -> None:
    calls = asyncio.run(_beats_after([AssertionError("reply.written"), RuntimeError("bug")],
                                     wanted=4))
    assert calls >= 4


def test_the_heartbeat_loop_goes_on_after_a_stamp_error() -> None:
    calls = asyncio.run(_beats_after([Unavailable("lock service electing")], wanted=3))
    assert calls >= 3


class _Managers:
    """Partition managers by address, and the address the lock service names as leading."""

    def __init__(self, leading: str | None) -> None:
        self.leading = leading
        self.reads = 0
        self.sent: list[str] = []

    async def read_leader(self) -> str | None:
        self.reads += 1
        return self.leading

    async def send(self, address: str) -> pb.HeartbeatReply:
        self.sent.append(address)
        if address != self.leading:
            raise NotLeader(f"{address} does not lead")
        return pb.HeartbeatReply()


def test_a_server_reads_the_leaders_address_once_not_every_beat() -> None:
    """Seen failing before (issue 29): every beat read `pm/leader-address`."""
    managers = _Managers("127.0.0.1:1")
    heartbeat = ps_main.LeaderHeartbeat(managers.read_leader, managers.send)
    for _ in range(3):
        assert asyncio.run(heartbeat.beat()) is not None
    assert managers.reads == 1 and managers.sent == ["127.0.0.1:1"] * 3


def test_a_beat_the_old_leader_refuses_goes_to_the_new_one_in_the_same_round() -> None:
    managers = _Managers("127.0.0.1:1")
    heartbeat = ps_main.LeaderHeartbeat(managers.read_leader, managers.send)
    asyncio.run(heartbeat.beat())
    managers.leading = "127.0.0.1:2"
    assert asyncio.run(heartbeat.beat()) is not None
    assert managers.sent == ["127.0.0.1:1", "127.0.0.1:1", "127.0.0.1:2"]


def test_a_beat_refused_while_no_other_leads_fails_and_the_next_one_asks_again() -> None:
    managers = _Managers("127.0.0.1:1")
    heartbeat = ps_main.LeaderHeartbeat(managers.read_leader, managers.send)
    asyncio.run(heartbeat.beat())
    managers.leading = None
    with pytest.raises(NotLeader):
        asyncio.run(heartbeat.beat())
    assert asyncio.run(heartbeat.beat()) is None  # nobody leads: nothing sent
    assert managers.reads == 3


def test_a_manager_that_does_not_lead_refuses_a_heartbeat() -> None:
    standby = PartitionManager("pm-2", "127.0.0.1:2", None, PartitionLimits())  # type: ignore[arg-type]
    with pytest.raises(NotLeader):
        standby.heartbeat(pb.ServerLoad(name="ps-1", address="127.0.0.1:11"))
    assert standby.heartbeats == {}


class _Session:
    def __init__(self, token: int) -> None:
        self.token = token
        self.alive = True

    def valid(self) -> bool:
        return self.alive


class _SessionLocks:
    """Sessions and puts, counted."""

    def __init__(self) -> None:
        self.sessions: list[_Session] = []
        self.puts: list[tuple[str, bytes, int]] = []

    def session(self, ttl_s: float, on_lost: object = None) -> _Session:
        self.sessions.append(_Session(len(self.sessions) + 1))
        return self.sessions[-1]

    def put(self, key: str, value: bytes, *, lease: _Session) -> int:
        self.puts.append((key, value, lease.token))
        return len(self.puts)


def test_a_registration_in_place_is_left_alone_and_a_lost_session_registers_again() -> None:
    """A beat skips `ensure` (a thread's round trip) while the registration is in place; once
    its session is no longer valid it is not, and `ensure` registers under a new one."""
    locks = _SessionLocks()
    server = types.SimpleNamespace(session=None)
    loop = asyncio.new_event_loop()  # only for losses (none here): never run
    registration = ps_main.Registration(locks, "ps-1", "127.0.0.1:11",  # type: ignore[arg-type]
                                        PartitionLimits(), server,  # type: ignore[arg-type]
                                        loop)
    loop.close()
    assert not registration.in_place() and registration.current() == 0
    registration.ensure()
    assert registration.in_place()
    assert locks.puts == [("ps/ps-1", b"127.0.0.1:11", 1)]
    # Heartbeats say the version written (the PM lists again when it is not the one it
    # listed: manager.py `_registration_changed`), 0 while the session is not valid.
    assert registration.current() == 1
    locks.sessions[0].alive = False  # lost (or past its claim)
    assert not registration.in_place() and registration.current() == 0
    registration.ensure()
    assert registration.in_place() and server.session is locks.sessions[1]
    assert locks.puts[-1] == ("ps/ps-1", b"127.0.0.1:11", 2)
    assert registration.current() == 2


def test_a_beat_says_the_registration_it_beats_under() -> None:
    """Without it the PM falls back to listing every LIVE_REFRESH_S: a server that lost its
    session would be seen up to a second later, and nothing else would fail."""
    locks = _SessionLocks()
    server = types.SimpleNamespace(
        session=None, load_pb=lambda address: pb.ServerLoad(name="ps-1", address=address))
    loop = asyncio.new_event_loop()  # only for losses (none here): never run
    registration = ps_main.Registration(locks, "ps-1", "127.0.0.1:11",  # type: ignore[arg-type]
                                        PartitionLimits(), server,  # type: ignore[arg-type]
                                        loop)
    loop.close()
    load = ps_main.beat_load(server, registration, "127.0.0.1:11")  # type: ignore[arg-type]
    assert load.HasField("registration") and load.registration == 0
    registration.ensure()
    assert ps_main.beat_load(server, registration,  # type: ignore[arg-type]
                             "127.0.0.1:11").registration == 1
