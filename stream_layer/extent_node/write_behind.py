"""Writing durable bytes into extent data files, behind the journal (§2: "Extent files are
written behind the journal; reads of bytes not yet in the extent file are served from
memory"), and the back-pressure on how much may wait in memory for it.

Contract: only bytes below a replica's durable_end are written (the journal has them first);
they leave `Replica.pending` once in the file (page cache: the checkpoint fsyncs), in offset
order, so file_end <= durable_end <= accepted_end holds throughout. `drain` waits until given
replicas' files reach given lengths.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from stream_layer.extent_node.extent_files import write_runs
from stream_layer.extent_node.replica import Replica

# Data-file writes up to this size are done on the event loop: a page-cache write of a few
# KiB costs less than handing it to a thread and back.
INLINE_WRITE_BYTES_MAX = 256 * 1024


class WriteBehind:
    def __init__(self, lookup: Callable[[int], Replica | None], pending_bytes_max: int,
                 pool: ThreadPoolExecutor) -> None:
        self._lookup = lookup
        self.pending_bytes_max = pending_bytes_max
        self._pool = pool
        # Bytes accepted (durable or on their way) and not yet in data files, all replicas.
        self.pending_total = 0
        self._to_write: dict[int, None] = {}  # extent ids with durable pending bytes, in order
        self._wake: asyncio.Event | None = None
        self._written: asyncio.Condition | None = None

    def start(self) -> asyncio.Task[None]:
        self._wake = asyncio.Event()
        self._written = asyncio.Condition()
        return asyncio.get_running_loop().create_task(self._run(), name="extent-writer")

    def durable(self, replica: Replica) -> None:
        """`replica`'s durable_end moved: write what it has pending up to there."""
        self._to_write[replica.extent_id] = None
        assert self._wake is not None
        self._wake.set()

    def drop(self, replica: Replica) -> None:
        """A deleted replica: forget what it had pending."""
        self.pending_total -= replica.pending_bytes
        replica.pending.clear()

    async def wait_for_room(self, nbytes: int) -> None:
        """Wait while too much is durable but not yet in data files (one append larger than
        the bound still goes, alone)."""
        if self.pending_total + nbytes <= self.pending_bytes_max:
            return
        assert self._written is not None
        async with self._written:
            await self._written.wait_for(
                lambda: self.pending_total == 0
                or self.pending_total + nbytes <= self.pending_bytes_max)

    async def drain(self, targets: dict[int, int]) -> None:
        """Wait until each replica's data file reaches the given length (or it is gone)."""
        assert self._written is not None

        def done() -> bool:
            for extent_id, end in targets.items():
                replica = self._lookup(extent_id)
                if replica is not None and replica.file_end < end:
                    return False
            return True
        async with self._written:
            await self._written.wait_for(done)

    async def _run(self) -> None:
        assert self._wake is not None and self._written is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._to_write:
                jobs = []
                for extent_id in list(self._to_write):
                    del self._to_write[extent_id]
                    replica = self._lookup(extent_id)
                    if replica is None:
                        continue
                    runs = [run for run in replica.pending
                            if run[0] + len(run[1]) <= replica.durable_end]
                    if runs:
                        jobs.append((replica, runs))
                if not jobs:
                    break
                # Large appends (in_file) are in the file already: the journal wrote them.
                batch = [(r.data_path, [(o, d) for o, d, in_file in runs if not in_file],
                          r.writeback_end) for r, runs in jobs]
                if sum(len(d) for _, runs, _ in batch for _, d in runs) <= INLINE_WRITE_BYTES_MAX:
                    # Into the page cache: cheaper than a thread hop.
                    writeback_ends = write_runs(batch)
                else:
                    writeback_ends = await asyncio.get_running_loop().run_in_executor(
                        self._pool, write_runs, batch)
                for (replica, runs), writeback_end in zip(jobs, writeback_ends, strict=True):
                    replica.writeback_end = writeback_end
                    written = sum(len(d) for _, d, _ in runs)
                    for _ in runs:
                        replica.pending.popleft()
                    replica.pending_bytes -= written
                    self.pending_total -= written
                    replica.file_end = runs[-1][0] + len(runs[-1][1])
                    replica.dirty = True
                    replica.check_lengths()
                async with self._written:
                    self._written.notify_all()
