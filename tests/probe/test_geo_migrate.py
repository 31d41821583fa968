"""Migrations (issue 30; tools/geo_migrate.py, tools/geo_balance.py) on a location of three
stamps: the location moves an account off west-1 on its own once west-1 passes the capacity
watermark, then `stamp location migrate NAME --to west-1` brings it back under SDK writers.
The writers see a pause, not an error; every acknowledged write is at the new primary, in
order, once; the secondary is a stamp of the other region, live and holding the same; a
stamp in neither role any more dropped its copy and its record."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from stampsdk import Client, connection_string

from partition_layer.client import PartitionClient
from tests.support.location import location_cli, stop_location, until
from tools.geo_account import accounts_at, stamps_of
from tools.geo_bootstrap import OPERATION_PREFIX
from tools.local_location import LocalLocation
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

WRITERS = 3
ACCOUNT = "mover"


class Writer:
    """Appends numbered records to its own log until stopped; every failure is kept."""

    def __init__(self, text: str, log: str) -> None:
        self.text, self.log = text, log
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with Client.from_connection_string(self.text, timeout_s=30) as client:
            while not self.stop.is_set():
                record = f"{self.log}-{len(self.acked)}".encode()
                try:
                    client.append(self.log, [record])
                except Exception as exc:  # a migration must not show as one
                    self.errors.append(repr(exc))
                    return
                self.acked.append(record)
                time.sleep(0.01)  # a steady trickle, not a flood: the copy is the point


@pytest.fixture
def location(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "location"
    try:
        yield directory
    finally:
        stop_location(directory)


def test_migrations_on_their_own_at_the_watermark_and_by_hand_under_load(location: Path
                                                                         ) -> None:
    # On its own: the location server's balancing round (every 2 s here) moves the largest
    # account of a stamp at least 70% used to the least used stamp of its region.
    location_cli(location, "up", "--stamps", "3", "--balance-interval-s", "2")
    location_cli(location, "create-account", "first")  # east-1 (all equal: by name)
    placed, text = location_cli(location, "create-account", ACCOUNT).splitlines()
    assert "primary west-1" in placed, placed  # east-1 is primary for one account already
    stamps = stamps_of(LocalLocation(location))
    with Client.from_connection_string(text, timeout_s=30) as client:
        client.put("profile", "me", b"written before the migrations")
        for i in range(FILLER_MB):
            client.append("filler", [bytes([i]) * (1 << 20)])
    location_cli(location, "up", "--stamps", "3")  # registers the stamps' use now
    used = used_mb(location_cli(location, "status"))
    # west-1 at 75% of it; west-2 with the account stays under 70%.
    capacity_mb = int(used["west-1"] / 0.75)
    assert used["west-2"] + FILLER_MB < 0.7 * capacity_mb, (used, capacity_mb)
    location_cli(location, "up", "--stamps", "3", "--capacity-mb", str(capacity_mb))
    until(lambda: "primary west-2, secondary east-1 (live)" in location_cli(
        location, "geo", ACCOUNT), "the account moved", timeout_s=120)
    until(lambda: ACCOUNT not in accounts_of(stamps["west-1"]), "west-1 dropped it")
    location_cli(location, "up", "--stamps", "3", "--capacity-mb", str(1 << 30))
    # By hand, under SDK writers, back to west-1, of west-2's region: the secondary must
    # leave for west-1's bootstrap, then come back to east-1, bootstrapped anew over its old
    # copy, and west-2 drops its own. Writers see a pause, not an error.
    writers = [Writer(text, f"log-{i}") for i in range(WRITERS)]
    until(lambda: all(len(w.acked) >= 20 for w in writers), "writes flow")
    out = location_cli(location, "migrate", ACCOUNT, "--to", "west-1")
    assert "primary west-1 (was west-2), secondary east-1" in out, out
    assert "east-1 is the secondary of west-1" in out and "west-2 dropped its copy" in out, out
    count = sum(len(w.acked) for w in writers)
    until(lambda: sum(len(w.acked) for w in writers) >= count + 30, "writes go on")
    for writer in writers:
        writer.stop.set()
        writer.thread.join(timeout=60)
        assert writer.errors == [], writer.errors
    assert "primary west-1, secondary east-1 (live)" in location_cli(location, "geo", ACCOUNT)
    with Client.from_connection_string(text, timeout_s=30) as client:
        assert client.get("profile", "me")[0] == b"written before the migrations"
        assert client.aio.location_answer.primary.name == "west-1"
        assert firsts(client) == [bytes([i]) for i in range(FILLER_MB)]
        expected = {w.log: [r for _, r in client.read(w.log, 0, 100_000)] for w in writers}
    for writer in writers:  # every acknowledged write, in order, once
        assert expected[writer.log] == writer.acked, writer.log
    with Client.from_connection_string(direct(stamps, "east-1"), timeout_s=30) as secondary:
        until(lambda: {w.log: [r for _, r in secondary.read(w.log, 0, 100_000)]
                       for w in writers} == expected, "the secondary holds the same")
    # west-2 holds the account in no role: no record, and none of its data.
    assert ACCOUNT not in accounts_of(stamps["west-2"])
    assert logs_at(stamps["west-2"]) == []
    assert "nothing to do" in location_cli(location, "migrate", ACCOUNT, "--to", "west-1")
    assert "has no stamp 'mars'" in location_cli(location, "migrate", ACCOUNT, "--to", "mars",
                                                 code=1)
    # One operation of an account at a time: another migration, a bootstrap or a planned
    # failover is refused while one holds its lock (the balancer's rounds included).
    with LocalLocation(location).store_client() as store:
        lease = store.locks.acquire(OPERATION_PREFIX + ACCOUNT, ttl_s=10)
        assert lease is not None
        try:
            for args in (("migrate", ACCOUNT, "--to", "west-2"),
                         ("failover", ACCOUNT, "--planned")):
                assert "is under way" in location_cli(location, *args, code=1)
        finally:
            lease.release()


def firsts(client: Client) -> list[bytes]:
    """The first byte of each filler record (a read answers a few MB at most)."""
    found: list[bytes] = []
    while len(found) < FILLER_MB:
        records = client.read("filler", len(found), FILLER_MB)
        assert records, found
        found += [r[:1] for _, r in records]
    return found


FILLER_MB = 24


def used_mb(status: str) -> dict[str, float]:
    """Each stamp's registered use, in MB, from `stamp location status`."""
    found = {}
    for line in status.splitlines():
        fields = line.split()
        if fields and fields[0] in ("west-1", "west-2", "east-1"):
            found[fields[0]] = int(fields[4].replace(",", "")) / (1 << 20)
    return found


def accounts_of(stamp: LocalStamp) -> list[str]:
    with accounts_at(stamp) as accounts:
        return accounts.list()


def direct(stamps: dict[str, LocalStamp], at: str) -> str:
    """A connection string of the account naming `at`'s front ends (no location), read as
    a secondary's (a secondary answers no other read)."""
    with accounts_at(stamps["west-1"]) as accounts:
        key = accounts.get(ACCOUNT).keys[0]
    return connection_string.make([r.address for r in stamps[at].front_ends()], ACCOUNT,
                                  key=key, read_from="secondary").format()


def logs_at(stamp: LocalStamp) -> list[str]:
    client = PartitionClient([r.address for r in stamp.partition_managers()],
                             stamp.config.partition)
    try:
        return list(client.list_logs(ACCOUNT))
    finally:
        client.close()
