"""`stamp location` (issue 30): a location service and two small stamps in two regions, each
on its own loopback address; accounts placed across regions, created on the primary and held
with the same keys by the secondary, so the account's key works at both; a create run again
changes nothing."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from stampsdk import Client
from stampsdk.errors import Moved

from tests.support.location import location_cli, stop_location, until
from tools.geo_account import stamps_of
from tools.local_location import LocalLocation

pytestmark = pytest.mark.slow


def primary_of(placed: str) -> str:
    """From "account NAME: primary STAMP, secondary STAMP (STATE)"."""
    return placed.split()[3].rstrip(",")


def secondary_of(placed: str) -> str:
    return placed.split()[5]


@pytest.fixture(scope="module")
def location(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One location for the module's tests (each runs `up`, which starts what is not
    running): a location's start is most of their time."""
    directory = tmp_path_factory.mktemp("geo") / "location"
    try:
        yield directory
    finally:
        stop_location(directory)  # by PID, whatever the test left running


def test_two_stamps_in_two_regions_and_an_account_placed_across_them(location: Path) -> None:
    assert "is not running" in location_cli(location, "status", code=1)
    out = location_cli(location, "up")
    assert "west-1 (west)" in out and "east-1 (east)" in out
    assert "127.0.0.2:" in out and "127.0.0.3:" in out
    first = location_cli(location, "create-account", "alpha").splitlines()
    assert first[0].startswith("account alpha: primary ")
    assert location_cli(location, "create-account", "alpha").splitlines() == first
    second = location_cli(location, "create-account", "beta").splitlines()
    # Equally used fresh stamps: the second account goes to the stamp with fewer accounts.
    assert primary_of(first[0]) != primary_of(second[0]), (first, second)
    assert {primary_of(first[0]), secondary_of(first[0])} == {"east-1", "west-1"}
    status = location_cli(location, "status").splitlines()
    assert status[0].startswith("location servers: 127.0.0.1:")
    rows = {line.split()[0]: line.split() for line in status[2:]}
    assert {name: (row[2], row[3]) for name, row in rows.items()} == {
        "east-1": ("1", "1"), "west-1": ("1", "1")}
    # The connection string names the location, which says where the primary is: writes go
    # there, and reach the secondary (inter-stamp replication) with their ETags; the
    # secondary refuses writes, naming the primary; a SIGKILLed partition server at the
    # primary loses the secondary nothing (its successor ships from the recorded position).
    assert first[1].startswith("Location=127.0.0.1:")
    endpoint = rows[secondary_of(first[0])][-1]
    key = base64.b64decode(first[1].split("Key=")[1])
    stamps = stamps_of(LocalLocation(location))
    with Client.from_connection_string(first[1], timeout_s=30) as primary, \
            Client([endpoint], "alpha", key=key, timeout_s=30,
                   read_from="secondary") as at_secondary:
        assert primary.append("log", [b"r0"]) == 0
        assert primary.aio.location_answer.primary.name == primary_of(first[0])
        assert primary.aio.endpoints == [rows[primary_of(first[0])][-1]]
        etag = primary.put("users", "alice", b"Oslo")
        for i in range(1, 20):
            primary.append("log", [f"r{i}".encode()])
        stamps[primary_of(first[0])].kill("ps-1")
        stamps[primary_of(first[0])].start("ps-1")
        for i in range(20, 40):
            primary.append("log", [f"r{i}".encode()])
        until(lambda: at_secondary.peek("log") == (0, 40), "the secondary has every record")
        assert [r for _, r in at_secondary.read("log", 0, 100)] == [
            f"r{i}".encode() for i in range(40)]
        assert at_secondary.get("users", "alice") == (b"Oslo", etag)
        with pytest.raises(Moved, match=f"its primary is stamp {primary_of(first[0])}"):
            at_secondary.append("log", [b"not here"])
    # A read not marked as a read of the secondary is meant for the primary: the secondary
    # sends it on rather than answer from a copy that may be behind.
    moved = f"is not read .* its primary is stamp {primary_of(first[0])}"
    with Client([endpoint], "alpha", key=key, timeout_s=30) as unmarked, \
            pytest.raises(Moved, match=moved):
        unmarked.get("users", "alice")


def test_a_planned_failover_under_load_loses_nothing_and_writers_go_on(location: Path
                                                                        ) -> None:
    """Writers through the SDK and a subscriber, then `stamp location failover --planned`:
    every acknowledged append is at the new primary once, in order; writers saw a pause, not
    an error, and went on there; the subscriber saw every record once; the old primary is
    the secondary now and receives what the new one takes."""
    location_cli(location, "up")
    placed, text = location_cli(location, "create-account", "gamma").splitlines()
    old, new = primary_of(placed), secondary_of(placed)
    stop, written = threading.Event(), threading.Event()
    acked: dict[str, list[bytes]] = {f"writer-{i}": [] for i in range(4)}
    errors: list[BaseException] = []
    pauses: list[float] = []

    def write(log: str) -> None:
        with Client.from_connection_string(text, timeout_s=60) as client:
            n, last = 0, time.monotonic()
            while not stop.is_set():
                record = f"{log}-{n}".encode()
                try:
                    client.append(log, [record])
                except Exception as exc:  # what the writer would see: none expected
                    errors.append(exc)
                    return
                acked[log].append(record)
                now = time.monotonic()
                pauses.append(now - last)
                last, n = now, n + 1

    seen: list[bytes] = []

    def subscribe() -> None:
        with Client.from_connection_string(text, timeout_s=60) as client:
            try:
                for _, record in client.subscribe("writer-0"):
                    seen.append(record)
                    # Done once every writer stopped and every record it got was seen.
                    if written.is_set() and len(seen) >= len(acked["writer-0"]):
                        return
            except Exception as exc:  # what the subscriber would see: none expected
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(log,)) for log in acked]
    threads.append(threading.Thread(target=subscribe, daemon=True))
    for thread in threads:
        thread.start()
    until(lambda: all(len(records) >= 20 for records in acked.values()), "writes flow")
    out = location_cli(location, "failover", "gamma", "--planned")
    assert f"primary {new} (was {old})" in out, out
    print(out.strip())
    count = sum(map(len, acked.values()))
    until(lambda: sum(map(len, acked.values())) >= count + 40, "writes go on at " + new)
    stop.set()
    for thread in threads[:-1]:
        thread.join(timeout=90)
    written.set()
    assert errors == []
    with Client.from_connection_string(text, timeout_s=30) as client:
        for log, records in acked.items():
            assert [r for _, r in client.read(log, 0, 10_000)] == records, log
        assert client.aio.location_answer.primary.name == new
    first = acked["writer-0"]
    until(lambda: seen[:len(first)] == first or bool(errors),
          lambda: f"the subscriber saw every record: {len(seen)} of {len(first)}, first "
                  f"difference at {first_difference(seen, first)}")
    assert errors == []
    assert seen == first[:len(seen)]  # once each, in order
    # The old primary is the secondary now: what the new one took reaches it.
    assert f"primary {new}, secondary {old}" in location_cli(location, "geo", "gamma")
    endpoint = LocalLocation(location)
    old_fronts = [r.address for r in stamps_of(endpoint)[old].front_ends()]
    key = base64.b64decode(text.split("Key=")[1])
    with Client(old_fronts, "gamma", key=key, timeout_s=30, read_from="secondary") as at_old:
        for log, records in acked.items():
            until(lambda log=log, records=records: at_old.peek(log) == (0, len(records)),
                  f"{old} has {log}")
        with pytest.raises(Moved, match=f"its primary is stamp {new}"):
            at_old.append("writer-0", [b"not here"])
    print(f"longest pause a writer saw: {max(pauses):.2f} s")
    assert "stopped" in location_cli(location, "down")


def first_difference(seen: list[bytes], expected: list[bytes]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(seen, expected, strict=False)) if a != b),
                None)
