"""The FUSE front of a `LossyTree`: every process that writes under the mount point goes
through it, so what a power cut keeps is decided by what those processes fsync'd, whoever
they are (extent nodes, Raft journals, the lock service, the partition layer, the CLI).

Data goes straight through to the backing files (the kernel sends every write to us: no
writeback cache), so a reader sees what was written; only the durability bookkeeping is ours.
Hard links are refused (Stamp makes none; the tree does not model them)."""

from __future__ import annotations

import errno
import os
from typing import Any

import mfusepy as fuse

from tools.lossyfs.tree import LossyTree

STAT_FIELDS = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_ino", "st_blocks")


def _stat(st: os.stat_result) -> dict[str, Any]:
    """Times in nanoseconds (`use_ns`)."""
    out: dict[str, Any] = {name: getattr(st, name) for name in STAT_FIELDS}
    out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
    return out


class LossyFS(fuse.Operations):
    """Passthrough operations; each mutation goes through the tree's bookkeeping."""

    use_ns = True

    def __init__(self, tree: LossyTree) -> None:
        self.tree = tree

    # ---- reading the namespace -------------------------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        if fh is not None and fh > 0:
            return _stat(os.fstat(fh))
        return _stat(os.lstat(self.tree.real(path)))

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self.tree.real(path))]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self.tree.real(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(self.tree.real(path))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self.tree.real(path))
        return {key: getattr(st, key) for key in (
            "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
            "f_flag", "f_frsize", "f_namemax")}

    # ---- files -----------------------------------------------------------------------------

    # Backing files are always opened read-write: the bookkeeping reads the bytes a write
    # replaces. Access checks and O_APPEND offsets are the kernel's business (it sends each
    # append with the offset of the end); O_TRUNC is the tree's (it saves what is cut).
    def create(self, path: str, mode: int, flags: int = 0) -> int:
        return self.tree.create(path, os.O_RDWR, mode)

    def open(self, path: str, flags: int) -> int:
        return self.tree.open(path, os.O_RDWR | (flags & os.O_TRUNC))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return self.tree.read(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return self.tree.write(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        self.tree.truncate(path, length, fh if fh else None)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        self.tree.fsync(fh)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        self.tree.close(fh)
        return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        raise fuse.FuseOSError(errno.EOPNOTSUPP)

    def link(self, target: str, source: str) -> int:
        raise fuse.FuseOSError(errno.EPERM)

    def symlink(self, target: str, source: str) -> int:
        raise fuse.FuseOSError(errno.EPERM)

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self.tree.real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self.tree.real(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self.tree.real(path))
        else:
            os.utime(self.tree.real(path), ns=times)
        return 0

    # ---- directories -----------------------------------------------------------------------

    def mkdir(self, path: str, mode: int) -> int:
        self.tree.mkdir(path, mode)
        return 0

    def rmdir(self, path: str) -> int:
        self.tree.rmdir(path)
        return 0

    def unlink(self, path: str) -> int:
        self.tree.unlink(path)
        return 0

    def rename(self, old: str, new: str) -> int:
        self.tree.rename(old, new)
        return 0

    def opendir(self, path: str) -> int:
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        self.tree.fsync_dir(path)
        return 0
