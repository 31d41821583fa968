"""An unplanned failover (issue 30; tools/geo_account.py): every process of an account's
primary stamp SIGKILLed under load, then `stamp location failover NAME --yes`: the
secondary takes the account's writes at once, and holds every write acknowledged before the
last sync time the command reported, and nothing that was never written. The old primary,
restarted, makes itself the secondary and keeps the writes it never shipped aside
(`stamp location tail`): every acknowledged write is at the new primary or in that report.
`stamp location bootstrap` then makes it a live copy of the new primary again."""

from __future__ import annotations

import base64
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from azure.core.exceptions import ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient
from stampsdk import Client, connection_string
from stampsdk.errors import NotFound

from partition_layer import keys
from partition_layer.client import PartitionClient
from partition_layer.geo_tail import request_of
from partition_layer.record_batch import decode_records
from partition_layer.rows import decode_row
from tests.support.location import location_cli, stop_location, until
from tools.geo_account import accounts_at, stamps_of, tails, unplanned_risk
from tools.local_front_ends import azure_connection_string
from tools.local_location import LocalLocation
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow

WRITERS = 4


@pytest.fixture(scope="module")
def location(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One location for the module's tests; the unplanned failover's, which kills a stamp,
    comes last."""
    directory = tmp_path_factory.mktemp("geo") / "location"
    try:
        yield directory
    finally:
        stop_location(directory)


class Writer:
    """Appends numbered records to its own log until it is stopped or a write fails: the
    records acknowledged, each with the wall time its answer came, and the one in doubt."""

    def __init__(self, text: str, log: str) -> None:
        self.text, self.log = text, log
        self.acked: list[tuple[bytes, float]] = []
        self.in_doubt: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with Client.from_connection_string(self.text, timeout_s=5) as client:
            n = 0
            while not self.stop.is_set():
                record = f"{self.log}-{n}".encode()
                try:
                    client.append(self.log, [record])
                except Exception:  # the primary stamp is gone: this one is in doubt
                    self.in_doubt.append(record)
                    return
                self.acked.append((record, time.time()))
                n += 1


def test_blobs_follow_their_account_to_its_new_primary(location: Path) -> None:
    """Azure's SDK against the stamps' blob endpoints: a write or a read sent to the
    secondary is answered by the primary, through it (frontend/blob_forward.py), so a read
    there sees at once what the primary took; after a planned failover, a client still
    pointed at the old primary writes and reads on, and its blobs are at the new one."""
    location_cli(location, "up")
    placed, text = location_cli(location, "create-account", "blobs").splitlines()
    old, new = placed.split()[3].rstrip(","), placed.split()[5]
    stamps = stamps_of(LocalLocation(location))
    key = base64.b64decode(text.split("Key=")[1])

    def container(stamp: str) -> ContainerClient:
        line = azure_connection_string(stamps[stamp].front_ends()[0], "blobs", key)
        assert line is not None
        return BlobServiceClient.from_connection_string(line).get_container_client("photos")

    def read(stamp: str, name: str) -> bytes | None:
        try:
            return container(stamp).download_blob(name).readall()
        except ResourceNotFoundError:
            return None

    at_old, at_new = container(old), container(new)
    at_old.create_container()
    at_old.upload_blob("a", b"first", blob_type="AppendBlob")
    at_old.get_blob_client("a").append_block(b", then more")
    # Sent to the secondary, answered by the primary: the read sees the append at once.
    assert read(new, "a") == b"first, then more"
    at_new.upload_blob("b", b"sent to the secondary", blob_type="AppendBlob")
    assert read(old, "b") == b"sent to the secondary"
    assert f"primary {new} (was {old})" in location_cli(location, "failover", "blobs",
                                                        "--planned")
    # The old primary passes writes and reads on.
    at_old.upload_blob("c", b"after the failover", blob_type="AppendBlob")
    at_new.get_blob_client("c").append_block(b", and more")
    assert read(old, "c") == b"after the failover, and more"
    assert read(new, "b") == b"sent to the secondary"


def test_a_client_reading_from_the_secondary_reads_what_was_synced_there(
        location: Path) -> None:
    """Read access to the secondary (Azure's RA-GRS; stampsdk/aio.py): writes through the
    SDK to the primary; once the last sync time has passed them, a `ReadFrom=secondary`
    client reads, scans, lists and follows them at the secondary, while every front end of
    the primary is frozen (so no read of it can have gone there); its writes still go to the
    primary."""
    location_cli(location, "up")
    placed, text = location_cli(location, "create-account", "reader").splitlines()
    primary, secondary = placed.split()[3].rstrip(","), placed.split()[5]
    started = time.monotonic()
    records = [f"event-{i}".encode() for i in range(20)]
    users = {f"user-{i}".encode(): f"city-{i}".encode() for i in range(5)}
    with Client.from_connection_string(text, timeout_s=30) as writer:
        assert writer.append("events", records) == 0
        for row, city in users.items():
            writer.put("users", row, city)
        written = datetime.now(UTC)  # after every write above was acknowledged
        until(lambda: (writer.last_sync_time() or datetime.min.replace(tzinfo=UTC))
              > written, "the last sync time passes the writes", timeout_s=20)
        synced_s = time.monotonic() - started
    fronts = [fe.pid for fe in stamps_of(LocalLocation(location))[primary].front_ends()]
    assert fronts
    with Client.from_connection_string(text + ";ReadFrom=secondary", timeout_s=10) as reader:
        for pid in fronts:
            os.kill(pid, signal.SIGSTOP)
        try:
            assert reader.read("events", 0) == list(enumerate(records))
            assert reader.peek("events") == (0, len(records))
            assert reader.get("users", b"user-3")[0] == b"city-3"
            assert {e.row: e.value for e in reader.scan("users")} == users
            assert list(reader.list_logs()) == ["events"]
            following = reader.subscribe("events", 0)
            assert list(itertools.islice(following, len(records))) == list(
                enumerate(records))
            following.close()  # type: ignore[attr-defined]
        finally:
            for pid in fronts:
                os.kill(pid, signal.SIGCONT)
        answer = reader.aio.location_answer
        assert (answer.primary.name, answer.secondary.name) == (primary, secondary)
        assert reader.aio.read_endpoints == list(answer.secondary.front_ends)
        # Its writes go to the primary, as any client's.
        assert reader.append("events", [b"through the reader"]) == len(records)
    with Client.from_connection_string(text, timeout_s=30) as writer:
        assert writer.read("events", len(records)) == [(len(records), b"through the reader")]
    print(f"last sync time past the writes after {synced_s:.1f} s; the whole test after "
          f"{time.monotonic() - started:.1f} s")


def test_an_unplanned_failover_keeps_what_was_synced_and_takes_writes_at_once(
        location: Path) -> None:
    location_cli(location, "up")
    placed, text = location_cli(location, "create-account", "delta").splitlines()
    old, new = placed.split()[3].rstrip(","), placed.split()[5]
    local = LocalLocation(location)
    # A client that knows where the account was (the location's answer, good for 60 s) and
    # carries on after the failover: it asks again once the old primary stops answering.
    survivor = Client.from_connection_string(text, timeout_s=30)
    survivor.append("survivor", [b"before"])
    writers = [Writer(text, f"log-{i}") for i in range(WRITERS)]
    until(lambda: all(len(w.acked) >= 30 for w in writers), "writes flow")
    # The primary's manager has reported a last sync time past some of them.
    mark = max(w.acked[20][1] for w in writers)
    until(lambda: unplanned_risk(local, "delta").synced_s > mark,
          "the location knows a last sync time")
    # The link to the secondary stalls (its front end frozen): what is acknowledged from
    # now on is not shipped, and is what the failover puts at risk.
    stamps = stamps_of(local)
    frozen = stamps[new].front_ends()[0].pid
    os.kill(frozen, signal.SIGSTOP)
    try:
        count = sum(len(w.acked) for w in writers)
        until(lambda: sum(len(w.acked) for w in writers) >= count + 40, "writes go on")
        stamps[old].kill_all()  # the whole primary stamp, SIGKILL
    finally:
        os.kill(frozen, signal.SIGCONT)
    for writer in writers:
        writer.stop.set()
        writer.thread.join(timeout=30)
        assert not writer.thread.is_alive()
    risk = unplanned_risk(local, "delta")  # what the command reports: the last report's
    # It asks before it acts; without a terminal to ask at, it needs --yes.
    assert "add --yes" in location_cli(location, "failover", "delta", code=1)
    started = time.monotonic()
    out = location_cli(location, "failover", "delta", "--yes")
    assert "s of writes at risk" in out and f"primary {new} (was {old}" in out, out
    with Client.from_connection_string(text, timeout_s=30) as client:
        client.append("after", [b"first at the new primary"])
        print(f"from the command to the first write acknowledged at {new}: "
              f"{time.monotonic() - started:.2f} s; at risk: {time.time() - risk.synced_s:.1f} s")
        with survivor:
            survivor.append("survivor", [b"after"])
            assert survivor.aio.location_answer.primary.name == new
        assert client.aio.location_answer.primary.name == new
        for writer in writers:
            there = [r for _, r in client.read(writer.log, 0, 100_000)]
            synced = [r for r, at in writer.acked if at <= risk.synced_s]
            # Every write acknowledged before the last sync time is there, in order, once;
            # what follows is a prefix of what was acknowledged or in doubt, nothing else.
            assert there[:len(synced)] == synced, writer.log
            assert there == [r for r, _ in writer.acked][:len(there)] \
                or there == [r for r, _ in writer.acked] + writer.in_doubt, writer.log
    assert f"primary {new}, secondary {old} (unavailable)" in location_cli(
        location, "geo", "delta")
    # The old primary's copy may hold what the new one never saw: no failover goes to it.
    assert "unavailable, not live" in location_cli(location, "failover", "delta",
                                                   "--planned", code=1)
    assert "no stamp of the location set writes of delta aside" in location_cli(
        location, "tail", "delta")
    # The old primary comes back: it is the account's secondary, and every write it
    # acknowledged is at the new primary or in its report, none merged into the new one.
    location_cli(location, "up")
    until(lambda: held_at(stamps[old], "delta") == ("secondary", new), "it demotes itself")
    until(lambda: bool(tails(local, "delta")), "its tail is set aside", timeout_s=60)
    until(lambda: tail_records(local) >= {r for w in writers for r, _ in w.acked}
          - at_new_primary(text, writers), "every acknowledged write is accounted for")
    (tail,) = tails(local, "delta")
    assert tail.stamp == old
    assert f"{old}: " in location_cli(location, "tail", "delta")
    with Client.from_connection_string(text, timeout_s=30) as client:
        for writer in writers:  # nothing of the tail went to the new primary
            there = [r for _, r in client.read(writer.log, 0, 100_000)]
            assert there == [r for r, _ in writer.acked][:len(there)], writer.log
    # A bootstrap makes the old primary a copy of the new one again, and live: the tail is
    # gone from its copy, and what the new primary holds is there, written before or after.
    logs = [w.log for w in writers] + ["after", "survivor", "late"]
    diverge(stamps[old])
    out = location_cli(location, "bootstrap", "delta")
    assert f"{old} is a live secondary of {new}" in out, out
    assert f"primary {new}, secondary {old} (live)" in location_cli(location, "geo", "delta")
    assert "live already" in location_cli(location, "bootstrap", "delta", code=1)
    with Client.from_connection_string(text, timeout_s=30) as client:
        client.append("late", [b"after the bootstrap"])
        expected = logs_at(client, logs)
    with Client.from_connection_string(direct(stamps, old, new), timeout_s=30) as at_old:
        until(lambda: logs_at(at_old, logs) == expected, "the old primary holds the new "
              "primary's logs, exactly")
        assert list(at_old.list_logs()) == sorted(logs)
        with pytest.raises(NotFound):
            at_old.get("diverged", "row")


def diverge(stamp: LocalStamp) -> None:
    """Writes the new primary never saw, in names it does not have, at the old primary (as
    its partition layer took them before it heard of the failover)."""
    client = PartitionClient([r.address for r in stamp.partition_managers()],
                             stamp.config.partition)
    try:
        client.put("delta", "diverged", "row", b"only at the old primary")
        client.append("delta", "diverged-log", [b"only at the old primary"])
    finally:
        client.close()


def direct(stamps: dict[str, LocalStamp], at: str, keys_from: str) -> str:
    """A connection string of account delta naming `at`'s front ends (no location), read
    as a secondary's (a secondary answers no other read)."""
    with accounts_at(stamps[keys_from]) as accounts:
        key = accounts.get("delta").keys[0]
    return connection_string.make([r.address for r in stamps[at].front_ends()], "delta",
                                  key=key, read_from="secondary").format()


def logs_at(client: Client, logs: list[str]) -> dict[str, list[bytes]]:
    return {log: [r for _, r in client.read(log, 0, 100_000)] for log in logs}


def held_at(stamp: LocalStamp, account: str) -> tuple[str, str]:
    with accounts_at(stamp) as accounts:
        geo = accounts.get(account).geo
    return geo.role, geo.primary


def tail_records(local: LocalLocation) -> set[bytes]:
    """The log records in the account's tail reports."""
    found = set()
    for tail in tails(local, "delta"):
        for line in tail.lines:
            request = request_of(line)
            for key, row in zip(request.replicate.keys, request.replicate.rows, strict=True):
                kind, seq_key = keys.decode_key(key)[2:]
                if kind == keys.KIND_RECORD:
                    value = decode_row(row).value
                    assert value is not None
                    last = keys.row_seq(seq_key)
                    found.update(data for _, data, _ in decode_records(value, last))
    return found


def at_new_primary(text: str, writers: list[Writer]) -> set[bytes]:
    with Client.from_connection_string(text, timeout_s=30) as client:
        return {r for w in writers for _, r in client.read(w.log, 0, 100_000)}
