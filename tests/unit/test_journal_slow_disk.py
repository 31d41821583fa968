"""A slow disk does not block the extent node's event loop (issue 29): after a journal write
that took longer than INLINE_SYNC_S_MAX, even a small batch is written on the journal's
thread, so the node still reads its secondaries' acks meanwhile (the primary's lag rule,
replication.py, can then tell its own slow journal from them); once writes are fast again,
small batches are synced on the loop as before."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from common import faults
from stream_layer.extent_node import journal as journal_module
from stream_layer.extent_node.journal import Journal


@pytest.fixture(autouse=True)
def _disarm() -> object:
    yield
    faults.disarm()


def test_a_slow_write_sends_the_next_small_batches_to_the_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[bool] = []  # per write: on the event loop's thread?
    write = Journal._write_and_sync

    def recording(self: Journal, data: bytes, file_writes: list) -> None:  # type: ignore[type-arg]
        threads.append(threading.current_thread() is loop_thread)
        write(self, data, file_writes)
    monkeypatch.setattr(Journal, "_write_and_sync", recording)
    loop_thread = threading.current_thread()

    async def scenario() -> None:
        journal = Journal(tmp_path, 1 << 20, 8 << 20, 64 << 20)
        journal.start()
        try:
            await journal.append(b"fast")
            faults.arm("journal.before_fsync", "delay",
                       journal_module.INLINE_SYNC_S_MAX * 1000 * 3)
            await journal.append(b"slow, on the loop: it was fast so far")
            await journal.append(b"slow, on the thread")
            faults.disarm("journal.before_fsync")
            await journal.append(b"fast again, still on the thread")
            await journal.append(b"fast, on the loop again")
        finally:
            await journal.stop()
    asyncio.run(scenario())
    assert threads == [True, True, False, False, True]
