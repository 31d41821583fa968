"""A durable, group-committed Raft journal for pysyncobj, shared by every Raft group of Stamp
(the lock service, §3, and the stream manager, §2: "its Raft journal must be durable before a
change is acknowledged"). pysyncobj's own FileJournal writes through mmap and never flushes.

Contract:
- `add`, `deleteEntriesFrom`, `deleteEntriesTo`, `clear` change the journal in memory at once
  and on disk at the next `sync()`: many changes share one fdatasync (group commit). `dirty`
  says a sync is owed. Nothing that depends on a change (an acknowledgement to a peer or a
  client) may leave the process before `sync()` returns: `common.raft.DurableTransport`
  holds outgoing Raft messages until then.
- `setCurrentTerm` is durable when it returns (Raft: term and vote before any vote is sent).
- `setRaftCommitIndex(i)` syncs first if an entry at or below `i` is not durable yet, so a
  leader never applies (and acknowledges) an entry that is not on its own disk. The commit
  index itself is only a hint for replay; it is written with the next sync.
- `deleteEntriesFrom` keeps the removed entries on disk until an `add` differs from them:
  pysyncobj deletes and re-adds identical entries under pipelined load, and an entry a
  follower acknowledged must not vanish from its disk because of that. (Raft itself only
  deletes entries that conflict.)
- `tail_hidden(i)` takes entries past `i` out of sight for one append_entries and puts them
  back; it writes nothing (common/raft_append.py: matching entries are never deleted).
- `deleteEntriesTo` and `clear` fsync the journal's directory first, so a snapshot renamed
  into it (pysyncobj renames without fsync) is durable before the entries it replaces go.
- Opening replays the records up to the last one whose length and CRC32C hold and cuts the
  file there (a torn tail): a crash loses at most the changes of the sync it interrupted.
- An I/O error while writing is fatal (after a failed fsync the page cache cannot be
  trusted): `on_fatal(exc)` is called; the default logs and exits the process.

File: 8-byte magic, then records `<u32 body bytes><u32 crc32c(type + body)><u8 type><body>`.
When garbage (deleted entries) dominates, the file is rewritten (tmp, fsync, rename, fsync dir).
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from pysyncobj.journal import Journal

from common import durable_fs, faults
from common.checksums import crc32c
from common.durable_fs import fsync_dir
from common.errors import FaultInjected, StampError

log = logging.getLogger(__name__)

MAGIC = b"STMPRJ01"
HEADER = struct.Struct("<IIB")  # body bytes, crc32c(type + body), type
U64 = struct.Struct("<Q")
ENTRY_HEAD = struct.Struct("<QQ")  # index, term

ENTRY, TRUNCATE, DROP_PREFIX, CLEAR, TERM, COMMIT = 1, 2, 3, 4, 5, 6
RECORD_TYPES = frozenset((ENTRY, TRUNCATE, DROP_PREFIX, CLEAR, TERM, COMMIT))

RECORD_BYTES_MAX = 256 * 1024 * 1024
# Unsynced bytes kept in memory before they are written (not yet synced) to the file.
BUFFER_BYTES_MAX = 8 * 1024 * 1024
# Rewrite the file when it is this big and more than REWRITE_RATIO times its live records.
REWRITE_BYTES_MIN = 4 * 1024 * 1024
REWRITE_RATIO = 2
EX_IOERR = 74

Entry = tuple[bytes, int, int]  # (command, index, term), as pysyncobj keeps them


class JournalCorrupt(StampError):
    """The journal cannot be replayed (not a torn tail: the file is not a journal at all)."""


def encode_record(kind: int, body: bytes) -> bytes:
    assert kind in RECORD_TYPES and len(body) <= RECORD_BYTES_MAX
    return HEADER.pack(len(body), crc32c(bytes((kind,)) + body), kind) + body


def scan_records(data: bytes | memoryview, offset: int) -> Iterator[tuple[int, bytes, int]]:
    """(type, body, end offset) of each valid record from `offset`, stopping at the first
    record that is cut short or whose checksum fails (a torn tail)."""
    view = memoryview(data)
    while offset + HEADER.size <= len(view):
        length, crc, kind = HEADER.unpack_from(view, offset)
        end = offset + HEADER.size + length
        if kind not in RECORD_TYPES or length > RECORD_BYTES_MAX or end > len(view):
            return
        body = bytes(view[offset + HEADER.size:end])
        if crc32c(bytes((kind,)) + body) != crc:
            return
        yield kind, body, end
        offset = end


def _default_on_fatal(exc: BaseException) -> None:
    log.critical("raft journal I/O failed (%r): stopping the process", exc)
    logging.shutdown()
    os._exit(EX_IOERR)


class DurableJournal(Journal):
    """pysyncobj's Journal interface, durable as the module docstring states."""

    def __init__(self, path: str | Path, *, fault_name: str = "raft_journal.sync",
                 on_fatal: Callable[[BaseException], None] = _default_on_fatal) -> None:
        self._path = Path(path)
        self._fault_name = fault_name
        self._on_fatal = on_fatal
        self._entries: list[Entry] = []
        self._removed_tail: deque[Entry] = deque()  # deleted in memory, still on disk
        self._term = 0
        self._voted_for: str | None = None
        self._commit = 1
        self._commit_on_disk = 1
        self._buffer = bytearray()
        self._written_unsynced = False
        self._unsynced_index_min: int | None = None
        self._file_bytes = 0
        self._live_bytes = 0
        self.syncs = 0  # fdatasync calls, for tests and benchmarks
        self._fd = self._open()

    # --- opening and replay ---------------------------------------------------------------

    def _open(self) -> int:
        durable_fs.make_dirs(self._path.parent)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._rewrite_path())  # an interrupted rewrite; the journal is intact
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        fsync_dir(self._path.parent)  # the journal's name must be as durable as its entries
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read()
        if len(data) < len(MAGIC) and MAGIC.startswith(data):
            # New, or torn while being created: start empty.
            os.ftruncate(fd, 0)
            os.write(fd, MAGIC)
            os.fsync(fd)
            fsync_dir(self._path.parent)
            data = MAGIC
        if not data.startswith(MAGIC):
            os.close(fd)
            raise JournalCorrupt(f"{self._path} is not a raft journal")
        end = len(MAGIC)
        for kind, body, record_end in scan_records(data, end):
            self._replay(kind, body)
            end = record_end
        if end < len(data):
            log.warning("raft journal %s: cut a torn tail of %d bytes at offset %d",
                        self._path, len(data) - end, end)
            os.ftruncate(fd, end)
            os.fsync(fd)
        os.lseek(fd, end, os.SEEK_SET)
        self._file_bytes = end
        self._commit_on_disk = self._commit
        log.info("raft journal %s: %d entries, term %d, commit %d", self._path,
                 len(self._entries), self._term, self._commit)
        return fd

    def _replay(self, kind: int, body: bytes) -> None:
        if kind == ENTRY:
            index, term = ENTRY_HEAD.unpack_from(body)
            if self._entries and index != self._entries[-1][1] + 1:
                raise JournalCorrupt(f"{self._path}: entry {index} follows "
                                     f"{self._entries[-1][1]}")
            self._entries.append((body[ENTRY_HEAD.size:], index, term))
            self._live_bytes += HEADER.size + len(body)
        elif kind == TRUNCATE:
            self._drop(lambda e: e[1] >= U64.unpack(body)[0])
        elif kind == DROP_PREFIX:
            self._drop(lambda e: e[1] < U64.unpack(body)[0])
        elif kind == CLEAR:
            self._entries, self._live_bytes = [], 0
        elif kind == TERM:
            (self._term,) = U64.unpack_from(body)
            vote = body[U64.size:]
            self._voted_for = vote[1:].decode() if vote[:1] == b"\x01" else None
        elif kind == COMMIT:
            (self._commit,) = U64.unpack(body)

    def _drop(self, doomed: Callable[[Entry], bool]) -> None:
        kept = [e for e in self._entries if not doomed(e)]
        self._live_bytes -= sum(_entry_bytes(e) for e in self._entries if doomed(e))
        self._entries = kept

    # --- pysyncobj's Journal interface ----------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        assert isinstance(command, bytes), "pysyncobj commands are bytes"
        if self._removed_tail:
            head = self._removed_tail[0]
            if head == (command, idx, term):
                # The same entry again: it never left the disk; take it back.
                self._entries.append(self._removed_tail.popleft())
                self._live_bytes += _entry_bytes(head)
                return
            self._append(TRUNCATE, U64.pack(self._removed_tail[0][1]))
            self._removed_tail.clear()
        if self._entries:
            assert idx == self._entries[-1][1] + 1, \
                f"entry {idx} appended after {self._entries[-1][1]}"
        entry = (command, idx, term)
        self._append(ENTRY, ENTRY_HEAD.pack(idx, term) + command)
        self._entries.append(entry)
        self._live_bytes += _entry_bytes(entry)
        if self._unsynced_index_min is None or idx < self._unsynced_index_min:
            self._unsynced_index_min = idx

    def clear(self) -> None:
        self._sync_dir()
        self._entries, self._live_bytes = [], 0
        self._removed_tail.clear()
        self._append(CLEAR, b"")
        self._maybe_rewrite()

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        removed = self._entries[entryFrom:]
        if not removed:
            return
        del self._entries[entryFrom:]
        self._live_bytes -= sum(_entry_bytes(e) for e in removed)
        self._removed_tail.extendleft(reversed(removed))

    def deleteEntriesTo(self, entryTo: int) -> None:
        self._sync_dir()
        dropped = self._entries[:entryTo]
        if not dropped:
            return
        self._entries = self._entries[entryTo:]
        self._live_bytes -= sum(_entry_bytes(e) for e in dropped)
        self._append(DROP_PREFIX, U64.pack(dropped[-1][1] + 1))
        self._maybe_rewrite()

    @contextlib.contextmanager
    def tail_hidden(self, after_index: int) -> Iterator[None]:
        """Entries past `after_index` are out of sight (not deleted: nothing is written)
        for the duration, then back. Only the handling of an append_entries that brings no
        entries may run inside (common/raft_append.py says why)."""
        # Entries are consecutive: the position follows from the first one's index.
        keep = max(0, after_index - self._entries[0][1] + 1) if self._entries else 0
        hidden = self._entries[keep:]
        del self._entries[keep:]
        try:
            yield
        finally:
            assert not self._entries or self._entries[-1][1] == after_index, \
                "entries changed while the tail was hidden"
            self._entries.extend(hidden)

    def __getitem__(self, item: int | slice) -> Entry | list[Entry]:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        self.close()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        self._commit = raftCommitIndex
        if self._unsynced_index_min is not None and self._unsynced_index_min <= raftCommitIndex:
            self.sync()

    def getRaftCommitIndex(self) -> int:
        return self._commit

    def setCurrentTerm(self, term: int, votedForNodeId: str | None) -> None:
        self._term, self._voted_for = term, votedForNodeId
        vote = b"\x00" if votedForNodeId is None else b"\x01" + str(votedForNodeId).encode()
        self._append(TERM, U64.pack(term) + vote)
        self.sync()

    def getCurrentTerm(self) -> int:
        return self._term

    def getVotedForNodeId(self) -> str | None:
        return self._voted_for

    def onOneSecondTimer(self) -> None:
        if self._commit != self._commit_on_disk:
            # Keeps restart replay short; the commit index is only a hint.
            self._append(COMMIT, U64.pack(self._commit))
            self.sync()

    # --- durability ------------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        """True while some change is not yet durable."""
        return bool(self._buffer) or self._written_unsynced

    def sync(self) -> None:
        """Make every change so far durable: one write and one fdatasync for all of them."""
        if self._fd < 0 or not self.dirty:
            return
        if self._commit != self._commit_on_disk:
            self._append(COMMIT, U64.pack(self._commit))  # a hint: rides along, never alone
        try:
            self._fault_point()
            self._write_buffer()
            os.fdatasync(self._fd)
        except (OSError, FaultInjected) as exc:
            self._on_fatal(exc)
            raise
        self.syncs += 1
        self._written_unsynced = False
        self._unsynced_index_min = None
        self._commit_on_disk = self._commit

    def close(self) -> None:
        if self._fd < 0:
            return
        if self._commit != self._commit_on_disk:
            self._append(COMMIT, U64.pack(self._commit))
        self.sync()
        os.close(self._fd)
        self._fd = -1

    def _append(self, kind: int, body: bytes) -> None:
        assert self._fd >= 0, "journal is closed"
        self._buffer += encode_record(kind, body)
        if len(self._buffer) >= BUFFER_BYTES_MAX:
            try:
                self._write_buffer()
            except OSError as exc:
                self._on_fatal(exc)
                raise

    def _write_buffer(self) -> None:
        view = memoryview(self._buffer)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
            self._file_bytes += written
        self._buffer = bytearray()
        self._written_unsynced = True

    def _fault_point(self) -> None:
        spec = faults.hit(self._fault_name)
        if spec is None:
            return
        if spec.action == "torn":
            # Half of this batch reaches the file, then the process dies (kill -9 mid-write).
            os.write(self._fd, bytes(self._buffer[:len(self._buffer) // 2]))
            faults.crash(self._fault_name)
        elif spec.action == "delay":
            time.sleep(spec.arg / 1000.0)
        elif spec.action == "fail":
            raise FaultInjected(f"fault injected at {self._fault_name}")
        elif spec.action == "crash":
            faults.crash(self._fault_name)

    def _sync_dir(self) -> None:
        try:
            fsync_dir(self._path.parent)
        except OSError as exc:
            self._on_fatal(exc)
            raise

    # --- rewriting ------------------------------------------------------------------------

    def _rewrite_path(self) -> Path:
        return self._path.with_name(self._path.name + ".rewrite")

    def _maybe_rewrite(self) -> None:
        size = self._file_bytes + len(self._buffer)
        if size >= REWRITE_BYTES_MIN and size > REWRITE_RATIO * (self._live_bytes + 4096):
            self.rewrite()

    def rewrite(self) -> None:
        """Replace the file by one holding only the live state (deleted entries and
        superseded records go; the removed tail stays on disk, as `deleteEntriesFrom`
        promises). Durable when it returns."""
        vote = b"\x00" if self._voted_for is None else b"\x01" + self._voted_for.encode()
        parts = [MAGIC, encode_record(TERM, U64.pack(self._term) + vote),
                 encode_record(COMMIT, U64.pack(self._commit))]
        parts += [encode_record(ENTRY, ENTRY_HEAD.pack(idx, term) + command)
                  for command, idx, term in [*self._entries, *self._removed_tail]]
        data = b"".join(parts)
        try:
            durable_fs.replace_file(self._path, data, tmp=self._rewrite_path())
            os.close(self._fd)
            self._fd = os.open(self._path, os.O_RDWR)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError as exc:
            self._on_fatal(exc)
            raise
        log.info("raft journal %s rewritten: %d -> %d bytes", self._path,
                 self._file_bytes + len(self._buffer), len(data))
        self._buffer = bytearray()
        self._written_unsynced = False
        self._unsynced_index_min = None
        self._file_bytes = len(data)
        self._commit_on_disk = self._commit


def _entry_bytes(entry: Entry) -> int:
    return HEADER.size + ENTRY_HEAD.size + len(entry[0])
