"""The extent store's file I/O on data files (blocking; the store runs it on its threads or,
for small writes, on the event loop). Commit point files are replica.py's `write_meta`.

Contract: a data file's name is durable (its directory fsync'd) before the file is handed out
(`create_data_file`): the journal then fdatasyncs large appends straight into it and
acknowledges them, and an fdatasync makes the bytes durable but not the name. Without the
directory fsync a power cut could keep the journal's record of those bytes and lose the file,
and recovery would refuse to start (§2, issue 15 hole 5).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from common.durable_fs import fsync_dir
from stream_layer.extent_node import writeback

WriteJob = tuple[Path, list[tuple[int, bytes]], int]  # (path, runs, writeback_end)


def create_data_file(path: Path, keep: bool, sync_dir: bool = True) -> None:
    """Create (or, unless `keep`, empty) a data file, and make its name durable (unless
    `sync_dir` is False: a replay syncs the directory once for all it created)."""
    flags = os.O_WRONLY | os.O_CREAT | (0 if keep else os.O_TRUNC)
    os.close(os.open(path, flags, 0o644))
    if sync_dir:
        fsync_dir(path.parent)


def write_runs(jobs: list[WriteJob]) -> list[int]:
    """Write each (path, runs, writeback_end) job's runs into its data file; start the
    writeback of what lies past writeback_end once that is WRITEBACK_BYTES_MIN or more.
    Returns each job's new writeback_end."""
    writeback_ends = []
    for path, runs, writeback_end in jobs:
        writeback_ends.append(writeback_end)
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            continue  # the extent was deleted meanwhile
        try:
            end = writeback_end
            for offset, data in runs:
                view = memoryview(data)
                while view:
                    written = os.pwrite(fd, view, offset)
                    view, offset = view[written:], offset + written
                end = max(end, offset)
            if end - writeback_end >= writeback.WRITEBACK_BYTES_MIN:
                writeback.start(fd, writeback_end, end - writeback_end)
                writeback_ends[-1] = end
        finally:
            os.close(fd)
    return writeback_ends


def remove_files(*paths: Path) -> None:
    """Unlink a deleted replica's files. Not durable by itself: the checkpoint fsyncs the
    directory before it drops the DELETE record, and a replay of that record unlinks again."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def fsync_file(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def truncate_file(path: Path, length: int) -> None:
    """Cut (or extend) a data file to `length`, durably; a missing file is created (its name
    is synced by recovery's final directory fsync)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != length:
            os.ftruncate(fd, length)
            os.fsync(fd)
    finally:
        os.close(fd)
