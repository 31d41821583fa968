"""Directory entries are made durable where an acknowledgement depends on them (issue 15 hole
5): every fsync and file creation is recorded, in order, from all threads, and the names a
later acknowledgement needs must be synced into their directory before it."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.config import load_config
from stream_layer.extent_node.store import ExtentStore
from tests.support.extent_store import LIMITS, append, open_store
from tools.local_stamp import LocalStamp

Event = tuple[str, Path]


@pytest.fixture
def disk_events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Event]]:
    """("create", path) for each os.open that may create a file, ("sync", path) for each
    fsync/fdatasync of a file or directory, in the order they happened."""
    events: list[Event] = []
    lock = threading.Lock()
    real_open, real_fsync, real_fdatasync = os.open, os.fsync, os.fdatasync

    def path_of(fd: int) -> Path:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))

    def recording_open(path: object, flags: int, *args: object, **kwargs: object) -> int:
        fd = real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]
        if flags & os.O_CREAT:
            with lock:
                events.append(("create", path_of(fd)))
        return fd

    def syncing(real: object) -> object:
        def sync(fd: int) -> None:
            with lock:
                events.append(("sync", path_of(fd)))
            real(fd)  # type: ignore[operator]
        return sync

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "fsync", syncing(real_fsync))
    monkeypatch.setattr(os, "fdatasync", syncing(real_fdatasync))
    yield events


def _synced_into_directory_before(events: list[Event], name: Path, before: int) -> bool:
    """Whether `name`'s directory was synced after `name` was (last) created and before
    event index `before`."""
    created = max(i for i, event in enumerate(events[:before]) if event == ("create", name))
    return ("sync", name.parent) in events[created + 1:before]


def test_a_new_extent_file_is_in_its_directory_before_a_large_append_is_acknowledged(
        tmp_path: Path, disk_events: list[Event]) -> None:
    """A large append is fdatasync'd straight into the new data file and acknowledged; a
    power cut must not then lose the file's name (the node would refuse to start)."""
    big = b"L" * (LIMITS.journal_bypass_bytes_min + 1)

    async def scenario() -> None:
        store: ExtentStore = open_store(tmp_path)
        await store.start()
        try:
            await store.create(11, ["me"])
            await append(store, 11, [big])
            data_file = store.get(11).data_path.resolve()
            # The first sync of the data file is the large append's, before its record.
            first_data_sync = disk_events.index(("sync", data_file))
            assert _synced_into_directory_before(disk_events, data_file, first_data_sync)
        finally:
            await store.stop()
    asyncio.run(scenario())


def test_recovery_makes_the_files_it_recreates_durable(tmp_path: Path,
                                                        disk_events: list[Event]) -> None:
    """A replica known only from its CREATE record (no commit point yet) gets its data file
    back in recovery; its name is durable before the journal that named it is dropped."""
    async def before_the_crash() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(12, ["me"])
        await store.stop()
    asyncio.run(before_the_crash())
    data_file = (tmp_path / "data").resolve() / next(
        p.name for p in (tmp_path / "data").glob("*.dat"))
    data_file.unlink()  # as a power cut that lost the unsynced name would leave it
    disk_events.clear()
    open_store(tmp_path)
    dropped = next(i for i, (kind, path) in enumerate(disk_events)
                   if kind == "sync" and path == (tmp_path / "journal").resolve())
    assert _synced_into_directory_before(disk_events, data_file, dropped)


def test_the_stamp_file_is_replaced_durably(tmp_path: Path, disk_events: list[Event]) -> None:
    """stamp.json records the ports, hence the addresses every replica set names: after a
    power cut it must hold the last saved version, not an empty file."""
    stamp = LocalStamp(tmp_path / "stamp", load_config(None))
    stamp.save()
    directory = (tmp_path / "stamp").resolve()
    syncs = [path for kind, path in disk_events if kind == "sync"]
    assert syncs[-2:] == [directory / "stamp.json.tmp", directory]
    assert (directory / "stamp.json").exists()
