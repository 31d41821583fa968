"""Early writeback of extent data files.

Appends reach a data file through the page cache, behind the journal (store.py), and the
checkpoint fsyncs the file every `checkpoint_interval_ms`. Left to itself the kernel holds
those dirty pages until that fsync, which then writes seconds of appends at once: the disk is
busy for tens of milliseconds and every journal fdatasync waits behind it (measured: commit
latencies spiking from 8 to 30-45 ms every two seconds under a steady append load). Starting
the writeback as data accumulates spreads the same writes out, and leaves the checkpoint's
fsync little to do.

`start(fd, offset, nbytes)` asks Linux to begin writing that range (sync_file_range with
SYNC_FILE_RANGE_WRITE: it does not wait for the writes and promises nothing about
durability, which stays the journal's and the checkpoint's job). Where the call does not
exist it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

from common.config import MiB

log = logging.getLogger(__name__)

# Start writeback once this much has been written past the last start: per write would cost
# a system call each and keep the disk busy with small writes.
WRITEBACK_BYTES_MIN = 1 * MiB
SYNC_FILE_RANGE_WRITE = 2


def _load() -> Callable[[int, int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        function = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_sync_file_range = _load()


def start(fd: int, offset: int, nbytes: int) -> None:
    """Begin writing back `nbytes` of `fd` from `offset`; a hint only (errors are logged)."""
    if _sync_file_range is None or nbytes <= 0:
        return
    if _sync_file_range(fd, offset, nbytes, SYNC_FILE_RANGE_WRITE) != 0:
        log.debug("sync_file_range failed: errno %d", ctypes.get_errno())
