"""The extent node journal on real files: group commit, order, torn tails, corruption."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from common.errors import Internal
from stream_layer.extent_node.journal import FileWrite, Journal, encode_record

MiB = 1 << 20


def make(directory: Path, segment_bytes_max: int = 64 * MiB) -> Journal:
    return Journal(directory, batch_bytes_max=MiB, queue_bytes_max=8 * MiB,
                   segment_bytes_max=segment_bytes_max)


def test_group_commit_many_appends_share_fsyncs_and_keep_order(tmp_path: Path) -> None:
    async def scenario() -> Journal:
        journal = make(tmp_path)
        journal.start()
        await asyncio.gather(*(journal.append(b"record-%04d" % i) for i in range(500)))
        await journal.stop()
        return journal
    journal = asyncio.run(scenario())
    assert journal.records == 500
    assert journal.syncs < 250, f"{journal.syncs} fsyncs for 500 concurrent appends"
    replayed = [body for _, body in make(tmp_path).replay()]
    assert replayed == [b"record-%04d" % i for i in range(500)]


def test_written_bytes_count_every_record_with_its_header_and_file_writes(
        tmp_path: Path) -> None:
    data_file = tmp_path / "extent"
    data_file.write_bytes(b"")

    async def scenario() -> Journal:
        journal = make(tmp_path / "journal")
        journal.start()
        await journal.append(b"abc")
        await journal.submit(b"de", FileWrite(data_file, 0, b"x" * 100))
        await journal.stop()
        return journal
    journal = asyncio.run(scenario())
    held = len(encode_record(b"abc")) + len(encode_record(b"de"))
    assert journal.held_bytes() == held
    assert journal.written_bytes == held + 100  # the FileWrite's bytes count too


def test_replay_cuts_a_torn_tail(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal = make(tmp_path)
        journal.start()
        for i in range(10):
            await journal.append(b"ok-%d" % i)
        await journal.stop()
    asyncio.run(scenario())
    segment = make(tmp_path).segments()[-1]
    whole = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(encode_record(b"half of this record is lost")[:13])
    replayed = [body for _, body in make(tmp_path).replay()]
    assert replayed == [b"ok-%d" % i for i in range(10)]
    assert segment.stat().st_size == whole, "the torn tail was not cut from the file"


def test_corruption_before_the_last_segment_stops_replay(tmp_path: Path) -> None:
    async def scenario() -> None:
        journal = make(tmp_path)
        journal.start()
        await journal.append(b"first segment")
        await journal.rotate()
        await journal.append(b"second segment")
        await journal.stop()
    asyncio.run(scenario())
    first = make(tmp_path).segments()[0]
    data = bytearray(first.read_bytes())
    data[-1] ^= 0xFF
    first.write_bytes(bytes(data))
    with pytest.raises(Internal, match="corrupt"):
        list(make(tmp_path).replay())


def test_rotate_and_drop(tmp_path: Path) -> None:
    async def scenario() -> list[Path]:
        journal = make(tmp_path)
        journal.start()
        await journal.append(b"a")
        closed = await journal.rotate()
        await journal.append(b"b")
        await journal.drop_through(closed)
        await journal.stop()
        return journal.segments()
    segments = asyncio.run(scenario())
    assert len(segments) == 1
    assert [body for _, body in make(tmp_path).replay()] == [b"b"]
