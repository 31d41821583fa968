"""A directory tree that remembers what is durable, and can lose the rest (a power cut).

`LossyTree` performs file-system operations on a backing directory and keeps, beside them,
what a power cut would leave (the LazyFS idea, for data *and* directory entries):

- **File bytes.** A file's durable state is its size and bytes at its last fsync/fdatasync
  (or when first seen: a file untouched since the mount is wholly durable). Every write or
  truncate that changes bytes below the durable size first saves the bytes it replaces (an
  undo record); fsync drops the records and moves the durable size to the current size.
- **Directory entries.** A directory's durable listing (name -> inode) is its listing at its
  last fsync (or when first touched). Creating, unlinking or renaming changes the live listing
  only; fsync of the directory makes the live listing durable. A new directory's own durable
  listing is empty. Unlinked and replaced inodes are moved to a trash directory, not deleted,
  so a cut can bring them back under their durable names.

`cut()` rolls the backing tree back to exactly the durable state: every tracked directory
gets its durable listing back (inodes that no durable name reaches are discarded), then every
surviving file gets its durable bytes and size back. Call it only when nothing uses the tree
(every process that wrote to it is dead): it is the moment the power comes back.

The model is the strict POSIX one (LazyFS, ALICE): an fsync of a file does not make its name
durable, nor does a rename become durable until the directory holding the new name is synced.
Real ext4 is often kinder (one journal commit carries earlier metadata); code that relies on
that kindness is what this is here to catch.

Limits: no hard links (`link` is refused by the file system in front), directories cannot be
renamed (Stamp never does; refused with EXDEV-like PermissionError), symlinks are not tracked.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

ROOT_DIR = "root"    # the tree that is shown (mounted)
TRASH_DIR = "trash"  # unlinked or replaced inodes, kept until the cut or the unmount
STAGE_DIR = "stage"  # used by a cut while it rebuilds the durable listings
DROPPED_NAMED = 50   # a cut's report names this many lost entries (what a test prints)


@dataclass
class FileState:
    """What a power cut would leave of one file (by inode)."""
    durable_size: int  # -1: a file kept whole whatever happens (`always_durable`)
    undo: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, replaced bytes)

    def undo_bytes(self) -> int:
        return sum(len(old) for _, old in self.undo)


@dataclass
class DirState:
    """A directory whose entries changed since the mount: its durable listing."""
    path: Path                   # where it is now (a removed directory lives in the trash)
    durable: dict[str, int]      # name -> inode at the last fsync of this directory


@dataclass
class CutReport:
    files_rolled_back: int = 0    # files whose bytes or size went back
    bytes_dropped: int = 0        # bytes past durable sizes plus bytes restored by undo
    entries_dropped: int = 0      # inodes that no durable name reached (discarded)
    entries_kept: int = 0         # durable names the tree has after the cut
    dropped: list[str] = field(default_factory=list)  # the first DROPPED_NAMED lost, by name

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class LossyTree:
    """Passthrough operations on `backing/root` that remember what is durable.

    Paths are relative to the root ("a/b", "" for the root). Thread-safe: every operation
    holds one lock (the FUSE front end calls from several threads)."""

    def __init__(self, backing: str | Path, always_durable: frozenset[str] = frozenset()
                 ) -> None:
        """`always_durable`: file names a cut keeps as they are (a process's log: a failed
        test can still be read)."""
        self.backing = Path(backing)
        self.always_durable = always_durable
        self.root = self.backing / ROOT_DIR
        self.trash = self.backing / TRASH_DIR
        self.root.mkdir(parents=True, exist_ok=True)
        if self.trash.exists():  # left by a daemon that died: nothing in it is durable
            shutil.rmtree(self.trash)
        self.trash.mkdir()
        self.lock = threading.RLock()
        self.files: dict[int, FileState] = {}
        self.dirs: dict[int, DirState] = {}
        self.fd_inode: dict[int, int] = {}
        self._trash_seq = 0
        self.cut_done = False

    # ---- paths -----------------------------------------------------------------------------

    def real(self, rel: str) -> Path:
        rel = rel.lstrip("/")
        if ".." in Path(rel).parts:
            raise PermissionError(errno.EPERM, "'..' is not allowed", rel)
        return self.root / rel if rel else self.root

    def _check_live(self) -> None:
        if self.cut_done:
            raise OSError(errno.EIO, "the power is off: this tree was cut")

    # ---- tracking --------------------------------------------------------------------------

    def _track_dir(self, path: Path) -> DirState:
        ino = os.lstat(path).st_ino
        state = self.dirs.get(ino)
        if state is None:
            state = DirState(path, _listing(path))
            self.dirs[ino] = state
        return state

    def _track_file(self, ino: int, size: int) -> FileState:
        state = self.files.get(ino)
        if state is None:
            state = FileState(durable_size=size)
            self.files[ino] = state
        return state

    def _to_trash(self, path: Path) -> None:
        """Keep an inode alive (open descriptors and a cut may still need it)."""
        self._trash_seq += 1
        target = self.trash / f"{self._trash_seq}"
        os.rename(path, target)
        st = os.lstat(target)
        state = self.dirs.get(st.st_ino)
        if state is not None:
            state.path = target

    # ---- files -----------------------------------------------------------------------------

    def create(self, rel: str, flags: int, mode: int) -> int:
        with self.lock:
            self._check_live()
            path = self.real(rel)
            self._track_dir(path.parent)
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
            st = os.fstat(fd)
            self.fd_inode[fd] = st.st_ino
            if path.name in self.always_durable:
                self.dirs[os.lstat(path.parent).st_ino].durable[path.name] = st.st_ino
                self.files[st.st_ino] = FileState(durable_size=-1)
            else:
                self.files[st.st_ino] = FileState(durable_size=0)  # new: nothing durable
            return fd

    def open(self, rel: str, flags: int) -> int:
        with self.lock:
            self._check_live()
            path = self.real(rel)
            truncate = bool(flags & os.O_TRUNC)
            fd = os.open(path, flags & ~os.O_TRUNC)
            st = os.fstat(fd)
            self.fd_inode[fd] = st.st_ino
            if path.name in self.always_durable:
                self.files[st.st_ino] = FileState(durable_size=-1)
            if truncate:
                self._truncate_fd(fd, 0)
            return fd

    def close(self, fd: int) -> None:
        with self.lock:
            self.fd_inode.pop(fd, None)
            os.close(fd)

    def read(self, fd: int, size: int, offset: int) -> bytes:
        return os.pread(fd, size, offset)

    def write(self, fd: int, data: bytes, offset: int) -> int:
        with self.lock:
            self._check_live()
            st = os.fstat(fd)
            state = self._track_file(st.st_ino, st.st_size)
            if state.durable_size < 0:  # always durable
                return os.pwrite(fd, data, offset)
            if offset < state.durable_size:
                end = min(offset + len(data), state.durable_size)
                state.undo.append((offset, os.pread(fd, end - offset, offset)))
            return os.pwrite(fd, data, offset)

    def truncate(self, rel: str, length: int, fd: int | None = None) -> None:
        with self.lock:
            self._check_live()
            if fd is not None:
                self._truncate_fd(fd, length)
                return
            fd = os.open(self.real(rel), os.O_RDWR)
            try:
                self._truncate_fd(fd, length)
            finally:
                os.close(fd)

    def _truncate_fd(self, fd: int, length: int) -> None:
        st = os.fstat(fd)
        state = self._track_file(st.st_ino, st.st_size)
        if length < state.durable_size:
            state.undo.append((length, os.pread(fd, state.durable_size - length, length)))
        os.ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        """fsync or fdatasync: the file's bytes and size become durable (not its name)."""
        with self.lock:
            self._check_live()
            st = os.fstat(fd)
            state = self._track_file(st.st_ino, st.st_size)
            if state.durable_size >= 0:
                state.undo.clear()
                state.durable_size = st.st_size

    # ---- directories -----------------------------------------------------------------------

    def fsync_dir(self, rel: str) -> None:
        """The directory's live listing becomes its durable listing."""
        with self.lock:
            self._check_live()
            path = self.real(rel)
            state = self._track_dir(path)
            state.durable = _listing(path)

    def mkdir(self, rel: str, mode: int) -> None:
        with self.lock:
            self._check_live()
            path = self.real(rel)
            self._track_dir(path.parent)
            os.mkdir(path, mode)
            self.dirs[os.lstat(path).st_ino] = DirState(path, {})

    def rmdir(self, rel: str) -> None:
        with self.lock:
            self._check_live()
            path = self.real(rel)
            if any(os.scandir(path)):
                raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), rel)
            self._track_dir(path.parent)
            self._track_dir(path)
            self._to_trash(path)

    def unlink(self, rel: str) -> None:
        with self.lock:
            self._check_live()
            path = self.real(rel)
            if path.is_dir() and not path.is_symlink():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), rel)
            self._track_dir(path.parent)
            self._to_trash(path)

    def rename(self, old: str, new: str) -> None:
        with self.lock:
            self._check_live()
            src, dst = self.real(old), self.real(new)
            if src.is_dir() and not src.is_symlink():
                raise PermissionError(errno.EXDEV, "lossyfs does not rename directories", old)
            self._track_dir(src.parent)
            self._track_dir(dst.parent)
            if dst.exists() or dst.is_symlink():
                if dst.is_dir() and not dst.is_symlink():
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), new)
                self._to_trash(dst)
            os.rename(src, dst)

    # ---- the cut ---------------------------------------------------------------------------

    def pending(self) -> dict[str, int]:
        """What is tracked: files, directories, and bytes a cut now would put back."""
        with self.lock:
            return {"files_tracked": len(self.files), "dirs_tracked": len(self.dirs),
                    "undo_bytes": sum(s.undo_bytes() for s in self.files.values())}

    def cut(self) -> CutReport:
        """Roll the tree back to its durable state; refuse every operation afterwards."""
        with self.lock:
            self.cut_done = True
            for fd in list(self.fd_inode):
                os.close(fd)
            self.fd_inode.clear()
            report = CutReport()
            placed = self._restore_listings(report)
            self._restore_bytes(placed, report)
            shutil.rmtree(self.trash)
            self.trash.mkdir()
            return report

    def _restore_listings(self, report: CutReport) -> dict[int, Path]:
        """Give every tracked directory its durable listing; return inode -> path of every
        entry placed (files and directories reached by durable names)."""
        stage = self.backing / STAGE_DIR
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir()
        root_ino = os.lstat(self.root).st_ino
        self._track_dir(self.root)
        # 1. Stage every entry of every tracked directory and of the trash, by inode. Deepest
        #    first, so a tracked directory is emptied before it is itself moved.
        order = sorted(self.dirs, key=lambda i: len(self.dirs[i].path.parts), reverse=True)
        live_names: dict[int, str] = {}
        for directory in [*(self.dirs[ino].path for ino in order), self.trash]:
            for entry in list(os.scandir(directory)):
                entry_ino = entry.inode()
                if directory != self.trash:
                    live_names[entry_ino] = os.path.relpath(entry.path, self.root)
                os.rename(entry.path, stage / str(entry_ino))
                if entry_ino in self.dirs:
                    self.dirs[entry_ino].path = stage / str(entry_ino)
        # 2. Rebuild from the root down. A tracked directory gets its durable listing back
        #    from the stage; an untracked one kept its entries in place (only its tracked
        #    descendants need work). A tracked directory no durable name reaches is gone.
        placed: dict[int, Path] = {root_ino: self.root}
        queue = [root_ino]
        while queue:
            dir_ino = queue.pop()
            here = placed[dir_ino]
            state = self.dirs.get(dir_ino)
            if state is None:
                for entry in os.scandir(here):
                    if entry.is_dir(follow_symlinks=False):
                        placed[entry.inode()] = Path(entry.path)
                        queue.append(entry.inode())
                continue
            state.path = here
            for name, ino in sorted(state.durable.items()):
                target = here / name
                source = stage / str(ino)
                if ino in placed:
                    if placed[ino].is_dir():
                        log.warning("lossyfs: directory inode %d has two durable names; kept "
                                    "%s, dropped %s", ino, placed[ino], target)
                        continue
                    os.link(placed[ino], target)  # a rename durable in both directories
                elif source.exists() or source.is_symlink():
                    os.rename(source, target)
                    placed[ino] = target
                else:
                    log.warning("lossyfs: durable entry %s (inode %d) has no inode left",
                                target, ino)
                    continue
                report.entries_kept += 1
                if target.is_dir() and not target.is_symlink():
                    queue.append(ino)
        # 3. What no durable name reached is lost.
        for entry in os.scandir(stage):
            report.entries_dropped += 1
            if len(report.dropped) < DROPPED_NAMED:
                report.dropped.append(live_names.get(int(entry.name), "(unlinked)"))
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        os.rmdir(stage)
        return placed

    def _restore_bytes(self, placed: dict[int, Path], report: CutReport) -> None:
        missing = {ino for ino in self.files if ino not in placed}
        if missing:
            placed = {**placed, **_find_inodes(self.root, missing)}
        for ino, state in self.files.items():
            if state.durable_size < 0:
                continue  # always durable
            path = placed.get(ino)
            if path is None:
                continue  # discarded with its last durable name (or never had one)
            fd = os.open(path, os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                if not state.undo and size == state.durable_size:
                    continue
                report.files_rolled_back += 1
                report.bytes_dropped += max(0, size - state.durable_size)
                for offset, old in reversed(state.undo):
                    os.pwrite(fd, old, offset)
                    report.bytes_dropped += len(old)
                os.ftruncate(fd, state.durable_size)
            finally:
                os.close(fd)


def _listing(path: Path) -> dict[str, int]:
    return {entry.name: entry.inode() for entry in os.scandir(path)}


def _find_inodes(root: Path, wanted: set[int]) -> dict[int, Path]:
    """Where these files are: written in place in directories whose entries never changed
    since the mount (so the cut never staged them). One walk of the tree."""
    found: dict[int, Path] = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            ino = os.lstat(path).st_ino
            if ino in wanted:
                found[ino] = path
    return found
