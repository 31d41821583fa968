"""The extent store on real files, in one process: recovery from commit points + journal,
checkpoints, seals and their survival across a crash (the store is abandoned, not closed)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from common.errors import (
    ChecksumError,
    ExtentFull,
    NotFound,
    OutOfRange,
    PreconditionFailed,
    Sealed,
    WrongOffset,
)
from stream_layer import framing
from stream_layer.extent_node import writeback
from tests.support.extent_store import LIMITS, append, open_store


async def no_peers(replica: object, target: int) -> None:
    raise AssertionError("no fetch expected")


def test_crash_before_checkpoint_recovers_from_the_journal(tmp_path: Path) -> None:
    async def write() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(7, ["me", "b", "c"])
        for i in range(50):
            await append(store, 7, [b"block-%d" % i])
        await store.stop()  # no checkpoint: as after SIGKILL, only the journal has it
    asyncio.run(write())

    async def read() -> None:
        store = open_store(tmp_path)
        await store.start()
        length, sealed = store.commit_length(7)
        assert not sealed
        frames = await store.read(7, 0, length)
        assert framing.payloads(frames, "t") == [b"block-%d" % i for i in range(50)]
        assert store.journal.segments() == [] or store.journal.held_bytes() == 0
        await store.stop()
    asyncio.run(read())


def test_checkpoint_records_commit_points_and_drops_the_journal(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(1, ["me"])
        end = await append(store, 1, [b"x" * 1000] * 5)
        await store.checkpoint()
        assert store.get(1).meta.file_length == end
        assert store.journal.held_bytes() == 0
        assert store.pending_bytes == 0
        await store.stop()
    asyncio.run(scenario())


def test_seal_truncates_and_survives_a_crash(tmp_path: Path) -> None:
    async def scenario() -> int:
        store = open_store(tmp_path)
        await store.start()
        await store.create(3, ["me", "b", "c"])
        cut = await append(store, 3, [b"kept"] * 3)
        await append(store, 3, [b"beyond the seal"] * 3)
        assert await store.seal(3, cut, no_peers) == cut
        assert await store.seal(3, cut, no_peers) == cut  # idempotent
        with pytest.raises(PreconditionFailed):
            await store.seal(3, cut + 1, no_peers)
        with pytest.raises(Sealed):
            store.accept_append(3, cut, framing.frame(b"late"))
        await store.stop()
        return cut
    cut = asyncio.run(scenario())

    async def after() -> None:
        store = open_store(tmp_path)
        await store.start()
        assert store.commit_length(3) == (cut, True)
        assert framing.payloads(await store.read(3, 0, 1 << 20), "t") == [b"kept"] * 3
        assert (tmp_path / "data").joinpath(store.get(3).data_path.name).stat().st_size == cut
        await store.stop()
    asyncio.run(after())


def test_refusals(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(5, ["me"])
        with pytest.raises(WrongOffset):
            store.accept_append(5, 10, framing.frame(b"x"))
        with pytest.raises(ExtentFull):
            store.accept_append(5, 0, framing.frame(b"x" * (1 << 20)))
        with pytest.raises(NotFound):
            store.get(6)
        end = await append(store, 5, [b"abc"])
        with pytest.raises(OutOfRange):
            await store.read(5, end, 10)
        await store.stop()
    asyncio.run(scenario())


def test_corrupt_byte_in_the_data_file_is_a_checksum_error(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(9, ["me"])
        await append(store, 9, [b"a" * 100, b"b" * 100])
        await store.checkpoint()
        path = store.get(9).data_path
        data = bytearray(path.read_bytes())
        data[150] ^= 0x01
        path.write_bytes(bytes(data))
        assert framing.payloads(await store.read(9, 0, 108), "t") == [b"a" * 100]
        with pytest.raises(ChecksumError):
            await store.read(9, 108, 108)
        with pytest.raises(ChecksumError):
            await store.read(9, 0, 1000)
        await store.stop()
    asyncio.run(scenario())


def test_deleted_extent_is_not_resurrected_by_replay(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(4, ["me"])
        await append(store, 4, [b"gone"])
        await store.delete(4)
        await store.stop()
    asyncio.run(scenario())
    store = open_store(tmp_path)
    assert 4 not in store.replicas
    assert list((tmp_path / "data").glob("*.dat")) == []


def test_large_appends_bypass_the_journal_and_survive_a_crash(tmp_path: Path) -> None:
    big = [bytes([i]) * (LIMITS.journal_bypass_bytes_min + 1) for i in range(3)]

    async def write() -> int:
        store = open_store(tmp_path)
        await store.start()
        await store.create(11, ["me"])
        await append(store, 11, [b"small"])
        for block in big:
            await append(store, 11, [block])
        end = await append(store, 11, [b"small again"])
        # The journal holds pointers to the large frames, not their bytes.
        assert store.journal.held_bytes() < 3 * LIMITS.journal_bypass_bytes_min
        await store.stop()  # no checkpoint
        return end
    end = asyncio.run(write())
    # A crash can leave synced-but-unrecorded bytes past the end: recovery cuts them.
    data_file = next((tmp_path / "data").glob("*.dat"))
    with open(data_file, "ab") as f:
        f.write(b"garbage past the last record")

    async def read() -> None:
        store = open_store(tmp_path)
        await store.start()
        assert store.commit_length(11) == (end, False)
        assert data_file.stat().st_size == end
        frames = await store.read(11, 0, 4 << 20)
        assert framing.payloads(frames, "t") == [b"small", *big, b"small again"]
        await store.stop()
    asyncio.run(read())


def test_seal_inside_large_appends_survives_a_crash(tmp_path: Path) -> None:
    big = b"L" * (LIMITS.journal_bypass_bytes_min + 1000)

    async def write() -> int:
        store = open_store(tmp_path)
        await store.start()
        await store.create(12, ["me", "x", "y"])
        cut = await append(store, 12, [big])
        await append(store, 12, [big])
        await store.seal(12, cut, no_peers)
        await store.stop()
        return cut
    cut = asyncio.run(write())
    store = open_store(tmp_path)
    assert store.commit_length(12) == (cut, True)
    assert store.get(12).data_path.stat().st_size == cut


def test_data_files_are_written_back_as_they_grow(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The store asks the kernel to start writing a data file back each time another
    WRITEBACK_BYTES_MIN has reached it (writeback.py), covering the file without gaps."""
    monkeypatch.setattr(writeback, "WRITEBACK_BYTES_MIN", 64 * 1024)
    started: list[tuple[int, int]] = []
    real_start = writeback.start

    def record(fd: int, offset: int, nbytes: int) -> None:
        started.append((offset, nbytes))
        real_start(fd, offset, nbytes)
    monkeypatch.setattr(writeback, "start", record)

    async def run() -> None:
        store = open_store(tmp_path)
        await store.start()
        await store.create(7, ["me", "b", "c"])
        for i in range(40):
            await append(store, 7, [bytes([i]) * 8000])
        await store.checkpoint()  # every append is in the data file now
        replica = store.get(7)
        assert started, "no writeback was started"
        assert started[0][0] == 0
        for (offset, nbytes), (next_offset, _) in itertools.pairwise(started):
            assert next_offset == offset + nbytes
        assert all(nbytes >= 64 * 1024 for _, nbytes in started)
        assert replica.writeback_end == started[-1][0] + started[-1][1]
        assert 0 <= replica.file_end - replica.writeback_end < 64 * 1024
        await store.stop()
    asyncio.run(run())
