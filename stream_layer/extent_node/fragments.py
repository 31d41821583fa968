"""Erasure-coded fragments on an extent node (§2 "Erasure coding"): whole files, written once,
beside (not through) the journal and the replica files.

On disk, one file per fragment, `frag-<extent>-<index>.dat`:
    [fragment bytes][u32 CRC32C of each page][trailer]
The trailer (TRAILER, fixed size, last in the file) names the extent, the fragment index, the
fragment's length, its page size and page count, the CRC32C of the whole fragment, and ends
with a CRC32C of the page CRCs and the rest of the trailer.

Contracts:
- A fragment exists only once it is whole and durable: it is written to a temporary file,
  checked against the CRC32C its writer sent (a mismatch refuses the write), fsync'd, renamed
  into place, and the directory fsync'd. A crash leaves either the old file or the new one;
  temporaries are removed at start. A rewrite (a repair) replaces the file atomically.
- Every read verifies the CRC32C of each page it touches and raises ChecksumError on a
  mismatch (a flipped bit at rest is never returned as data); `verify` reads every page.
- Nothing here is in the journal: a fragment is not an append, and its durability is the
  rename's, so the journal and replica code paths stay as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from common import faults
from common.checksums import crc32c
from common.durable_fs import fsync_dir, make_dirs
from common.errors import ChecksumError, InvalidArgument, NotFound
from common.ids import extent_file_stem

log = logging.getLogger(__name__)

T = TypeVar("T")
MAGIC = 0x46524147  # "FRAG"
# magic, extent id, index, length, page bytes, pages, fragment crc32c, trailer crc32c
TRAILER = struct.Struct("<IQHQIIII")
PAGE_BYTES = 64 * 1024
FRAGMENT_INDEX_MAX = 255
IO_THREADS = 4


@dataclass(frozen=True)
class FragmentInfo:
    extent_id: int
    index: int
    length: int
    crc: int
    page_bytes: int
    page_crcs: tuple[int, ...]


def fragment_name(extent_id: int, index: int) -> str:
    return f"frag-{extent_file_stem(extent_id)[4:]}-{index:03d}.dat"


def _encode_trailer(info: FragmentInfo) -> bytes:
    crcs = struct.pack(f"<{len(info.page_crcs)}I", *info.page_crcs)
    head = TRAILER.pack(MAGIC, info.extent_id, info.index, info.length, info.page_bytes,
                        len(info.page_crcs), info.crc, 0)[:-4]
    return crcs + head + struct.pack("<I", crc32c(crcs + head))


def _read_info(fd: int, path: Path) -> FragmentInfo:
    size = os.fstat(fd).st_size
    if size < TRAILER.size:
        raise ChecksumError(f"fragment file {path.name} is too short for its trailer")
    magic, extent_id, index, length, page_bytes, pages, crc, trailer_crc = TRAILER.unpack(
        os.pread(fd, TRAILER.size, size - TRAILER.size))
    crcs_at = size - TRAILER.size - 4 * pages
    if magic != MAGIC or crcs_at != length or page_bytes <= 0:
        raise ChecksumError(f"fragment file {path.name} has a damaged trailer")
    tail = os.pread(fd, 4 * pages + TRAILER.size - 4, crcs_at)
    if crc32c(tail) != trailer_crc:
        raise ChecksumError(f"fragment file {path.name}: trailer checksum mismatch")
    page_crcs = struct.unpack(f"<{pages}I", tail[:4 * pages])
    return FragmentInfo(extent_id, index, length, crc, page_bytes, page_crcs)


class FragmentWriter:
    """One fragment being received: bytes in order, page CRCs computed as they arrive."""

    _serial = itertools.count()

    def __init__(self, directory: Path, extent_id: int, index: int, length: int,
                 crc: int) -> None:
        if not 0 <= index <= FRAGMENT_INDEX_MAX:
            raise InvalidArgument(f"fragment index {index} not in 0..{FRAGMENT_INDEX_MAX}")
        self.extent_id, self.index, self.length, self.crc = extent_id, index, length, crc
        self.path = directory / fragment_name(extent_id, index)
        self.tmp = self.path.with_suffix(f".{os.getpid()}.{next(self._serial)}.tmp")
        self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._written = 0
        self._whole = 0
        self._page_crcs: list[int] = []
        self._carry = b""

    def write(self, offset: int, data: bytes) -> None:
        if offset != self._written:
            raise InvalidArgument(f"fragment {self.index} of extent {self.extent_id}: chunk "
                                  f"at {offset}, expected {self._written}")
        if self._written + len(data) > self.length:
            raise InvalidArgument(f"fragment {self.index} of extent {self.extent_id}: more "
                                  f"than its {self.length} bytes")
        view = memoryview(data)
        while view:
            n = os.pwrite(self._fd, view, self._written)
            view, self._written = view[n:], self._written + n
        self._whole = crc32c(data, self._whole)
        pending = self._carry + data
        whole_pages = len(pending) - len(pending) % PAGE_BYTES
        for at in range(0, whole_pages, PAGE_BYTES):
            self._page_crcs.append(crc32c(pending[at:at + PAGE_BYTES]))
        self._carry = pending[whole_pages:]

    def finish(self) -> FragmentInfo:
        """Check length and CRC, make the fragment durable and put it in place."""
        try:
            if self._written != self.length:
                raise InvalidArgument(f"fragment {self.index} of extent {self.extent_id}: "
                                      f"{self._written} of {self.length} bytes arrived")
            if self._whole != self.crc:
                raise ChecksumError(f"fragment {self.index} of extent {self.extent_id}: "
                                    f"crc32c {self._whole:#010x}, the writer sent "
                                    f"{self.crc:#010x}")
            if self._carry:
                self._page_crcs.append(crc32c(self._carry))
            info = FragmentInfo(self.extent_id, self.index, self.length, self.crc, PAGE_BYTES,
                                tuple(self._page_crcs))
            os.pwrite(self._fd, _encode_trailer(info), self.length)
            os.fsync(self._fd)
        except BaseException:
            self.abort()
            raise
        os.close(self._fd)
        faults.point("en.fragment.before_rename")
        os.replace(self.tmp, self.path)
        fsync_dir(self.path.parent)
        return info

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(FileNotFoundError):
            self.tmp.unlink()


class FragmentStore:
    """The fragments of one extent node, in one directory; blocking I/O in a thread pool."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        make_dirs(directory)
        for stale in directory.glob("*.tmp"):  # writes a crash interrupted
            stale.unlink()
        self._io = ThreadPoolExecutor(max_workers=IO_THREADS, thread_name_prefix="fragment-io")

    def close(self) -> None:
        self._io.shutdown(wait=True)

    async def _in(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    # ---- writes ---------------------------------------------------------------------------

    async def begin(self, extent_id: int, index: int, length: int, crc: int) -> FragmentWriter:
        return await self._in(FragmentWriter, self.directory, extent_id, index, length, crc)

    async def write(self, writer: FragmentWriter, offset: int, data: bytes) -> None:
        await self._in(writer.write, offset, data)

    async def finish(self, writer: FragmentWriter) -> FragmentInfo:
        info = await self._in(writer.finish)
        log.info("fragment %d of extent %d stored (%d bytes)", writer.index, writer.extent_id,
                 writer.length)
        return info

    async def abort(self, writer: FragmentWriter) -> None:
        await self._in(writer.abort)

    async def delete(self, extent_id: int, index: int) -> None:
        await self._in(self._delete, extent_id, index)

    def _delete(self, extent_id: int, index: int) -> None:
        path = self.directory / fragment_name(extent_id, index)
        try:
            path.unlink()
        except FileNotFoundError:
            raise NotFound(f"no fragment {index} of extent {extent_id} here") from None
        fsync_dir(self.directory)

    # ---- reads ----------------------------------------------------------------------------

    async def read(self, extent_id: int, index: int, offset: int, length: int) -> bytes:
        """Fragment bytes [offset, offset+length), every page they touch verified."""
        return await self._in(self._read, extent_id, index, offset, length)

    async def verify(self, extent_id: int, index: int) -> FragmentInfo:
        """Read and verify every page; the fragment's info (its recorded CRC32C among it)."""
        return await self._in(self._verify, extent_id, index)

    def list(self) -> list[tuple[int, int]]:
        """(extent id, index) of every fragment file here (names only, nothing verified)."""
        found = []
        for path in self.directory.glob("frag-*.dat"):
            _, extent_hex, index = path.stem.split("-")
            found.append((int(extent_hex, 16), int(index)))
        return sorted(found)

    def _open(self, extent_id: int, index: int) -> tuple[int, Path]:
        path = self.directory / fragment_name(extent_id, index)
        try:
            return os.open(path, os.O_RDONLY), path
        except FileNotFoundError:
            raise NotFound(f"no fragment {index} of extent {extent_id} here") from None

    def _read(self, extent_id: int, index: int, offset: int, length: int) -> bytes:
        fd, path = self._open(extent_id, index)
        try:
            info = _read_info(fd, path)
            self._check_identity(info, extent_id, index, path)
            if offset < 0 or length < 0 or offset + length > info.length:
                raise InvalidArgument(f"fragment {index} of extent {extent_id} has "
                                      f"{info.length} bytes: cannot read [{offset}, "
                                      f"{offset + length})")
            if length == 0:
                return b""
            first, last = offset // info.page_bytes, (offset + length - 1) // info.page_bytes
            start = first * info.page_bytes
            span = os.pread(fd, min(info.length, (last + 1) * info.page_bytes) - start, start)
            for page in range(first, last + 1):
                at = (page - first) * info.page_bytes
                if crc32c(span[at:at + info.page_bytes]) != info.page_crcs[page]:
                    raise ChecksumError(f"fragment {index} of extent {extent_id}: page {page} "
                                        f"fails its checksum")
            return span[offset - start:offset - start + length]
        finally:
            os.close(fd)

    def _verify(self, extent_id: int, index: int) -> FragmentInfo:
        fd, path = self._open(extent_id, index)
        try:
            info = _read_info(fd, path)
            self._check_identity(info, extent_id, index, path)
            whole = 0
            for page, expected in enumerate(info.page_crcs):
                at = page * info.page_bytes
                data = os.pread(fd, min(info.page_bytes, info.length - at), at)
                if crc32c(data) != expected:
                    raise ChecksumError(f"fragment {index} of extent {extent_id}: page "
                                        f"{page} fails its checksum")
                whole = crc32c(data, whole)
            if whole != info.crc:
                raise ChecksumError(f"fragment {index} of extent {extent_id}: whole-fragment "
                                    f"checksum mismatch")
            return info
        finally:
            os.close(fd)

    @staticmethod
    def _check_identity(info: FragmentInfo, extent_id: int, index: int, path: Path) -> None:
        if (info.extent_id, info.index) != (extent_id, index):
            raise ChecksumError(f"fragment file {path.name} holds fragment {info.index} of "
                                f"extent {info.extent_id}")
