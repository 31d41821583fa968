"""File-system steps that survive a power cut, for every process.

Contract (POSIX, and what tools/lossyfs enforces in the power-cut tests): a file's bytes are
durable after fsync/fdatasync of the file; its *name* is durable only after an fsync of the
directory that holds it; a new directory's name is durable only after an fsync of its parent.
So whoever creates a file or directory that must outlive a crash syncs the parent directory
before relying on it (before acknowledging anything stored in it).
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: str | Path) -> None:
    """Make the entries of directory `path` (creates, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: str | Path) -> Path:
    """`mkdir -p` whose result is durable: each directory created is synced into its parent
    (parents first), and `path`'s own entry is synced even when it existed (a process that
    made it may have died before syncing it; one fsync at start is cheap)."""
    path = Path(path)
    missing: list[Path] = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:  # made meanwhile by someone else: they sync it
            continue
        fsync_dir(directory.parent)
    if not missing:
        fsync_dir(path.parent)
    return path


def replace_file(path: str | Path, data: bytes, tmp: Path | None = None) -> None:
    """Atomically and durably give `path` the contents `data`: a temporary file (`tmp`, by
    default `path` + ".tmp"), fsync'd, renamed over `path`, and the directory synced (a crash
    leaves the old or the new file; a leftover temporary file is the caller's to remove)."""
    path = Path(path)
    tmp = tmp or path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)
