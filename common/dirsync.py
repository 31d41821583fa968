"""Directory entries made durable (§2: durability means fsync before acknowledgement).

A file's fsync makes its bytes durable, not its name: a file created, renamed or unlinked is
only durably so once its directory is fsync'd too, and a directory made by `mkdir` only once
its parent is. After a power cut, a name that was never synced may be gone with the file's
bytes (or still there, for an unlink). Every process goes through these two.
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: str | Path) -> None:
    """Make the entries of directory `path` (creations, renames, unlinks) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: str | Path) -> None:
    """`mkdir -p path`, durably: each directory it creates is synced into its parent."""
    path = Path(path)
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            if not directory.is_dir():
                raise
        fsync_dir(directory.parent)


def write_file_durably(path: str | Path, data: bytes) -> None:
    """Replace `path` by `data` atomically and durably: a temp file, fsync'd, renamed over
    it, and the directory fsync'd."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
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
