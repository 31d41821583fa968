"""The stamp secret (§9): one random string a whole stamp shares, with which its Raft replicas
(lock service, stream managers) authenticate and encrypt each other's traffic (pysyncobj's
`password`, common/raft.py). Without it pysyncobj unpickles whatever reaches its port.

Contract:
- The secret lives in one file, mode 0600: `<data dir>/stamp-secret` for a stamp on this
  machine, which `stamp up` (and `stamp start`) makes once if it is missing (`ensure`). A
  stamp across hosts has a copy of the same file in the data directory of every host: a host
  whose secret differs could not join its groups, so there `stamp up` never makes one (made
  once with `python -m common.stamp_secret FILE`, then copied).
- Processes are given the file's PATH (`--secret-file`), never the secret: argv is shown to
  every user (ps), and stamp.json and the logs are read by tools and people.
- `read` refuses a file that others may read or that is too short, with an error that names
  the path, never the content.

Rotation: stop both groups, replace the file on every host, start them again (a replica
with another secret than its peers' cannot talk to them: the groups must change together).
"""

from __future__ import annotations

import argparse
import errno
import os
import secrets
import stat
import sys
from pathlib import Path

from common.durable_fs import fsync_dir, make_dirs
from common.errors import InvalidArgument

SECRET_FILE = "stamp-secret"
SECRET_ARG = "--secret-file"
SECRET_RANDOM_BYTES = 32  # drawn by `secrets`, written url-safe base64 (43 characters)
SECRET_CHARS_MIN = 32
SECRET_FILE_BYTES_MAX = 4096
SECRET_FILE_MODE = 0o600
# What link(2) fails with where a file system has no hard links.
NO_HARD_LINKS = (errno.EPERM, errno.ENOSYS, errno.EOPNOTSUPP)


def path_in(data_dir: str | Path) -> Path:
    """Where a stamp keeps its secret."""
    return Path(data_dir) / SECRET_FILE


def make(path: str | Path) -> bool:
    """Make a new secret at `path` (mode 0600, durably) unless a file is there; return
    whether this call made it. The file appears whole (a finished, synced temporary file
    linked, or renamed, into place: a crash leaves no half secret), and concurrent callers
    end with the same secret (the link is exclusive; a file system without hard links, as
    the power-cut harness's, gets a rename if the name is still free)."""
    path = Path(path)
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")  # one per caller
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_FILE_MODE)
        try:
            os.fchmod(fd, SECRET_FILE_MODE)  # whatever the umask
            os.write(fd, secrets.token_urlsafe(SECRET_RANDOM_BYTES).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError as error:
            if error.errno not in NO_HARD_LINKS or path.exists():
                raise
            os.rename(tmp, path)
        fsync_dir(path.parent)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def ensure(data_dir: str | Path, *, may_make: bool = True) -> Path:
    """The secret file of the stamp in `data_dir`, made if missing and `may_make` (a stamp
    on one machine); with `may_make` False (a stamp across hosts) a missing file is an
    InvalidArgument saying how to provide it. Checked as `read` checks it."""
    path = path_in(data_dir)
    make_dirs(data_dir)
    if not path.exists():
        if not may_make:
            raise InvalidArgument(
                f"no stamp secret at {path}: every host of a stamp across hosts needs a copy "
                f"of the same one (make it once with `python -m common.stamp_secret FILE`, "
                f"then copy FILE there with mode 0600)")
        make(path)
    read(path)
    return path


def read(path: str | Path) -> bytes:
    """The secret in `path`, or an InvalidArgument naming the path (never the content) if
    the file is missing, readable or writable by others than its owner, or too short."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        raise InvalidArgument(f"cannot read the stamp secret {path}: "
                              f"{error.strerror or error}") from None
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise InvalidArgument(f"the stamp secret {path} is open to other users (mode "
                                  f"{mode:04o}): chmod 600 it")
        secret = os.read(fd, SECRET_FILE_BYTES_MAX).strip()
    finally:
        os.close(fd)
    if len(secret) < SECRET_CHARS_MIN:
        raise InvalidArgument(f"the stamp secret {path} is too short: at least "
                              f"{SECRET_CHARS_MIN} characters")
    return secret


def add_arg(parser: argparse.ArgumentParser) -> None:
    """The option a Raft replica's process is given its secret's file with: required, so a
    replica never runs unauthenticated."""
    parser.add_argument(SECRET_ARG, dest="secret_file", required=True, type=Path,
                        metavar="FILE", help="the stamp secret (a file of mode 0600): Raft "
                        "peers authenticate and encrypt their traffic with it")


def read_or_exit(path: str | Path, name: str) -> bytes:
    """`read`, for a process starting: a bad file ends it with one clear line (stderr, the
    process's log), not a traceback."""
    try:
        return read(path)
    except InvalidArgument as error:
        raise SystemExit(f"{name}: {error}") from None


def with_arg(argv: list[str], path: str | Path) -> list[str]:
    """`argv` of a Raft replica, given `--secret-file PATH` if it has none (a stamp recorded
    before it had a secret gets it on its next start)."""
    return argv if SECRET_ARG in argv else [*argv, SECRET_ARG, str(path)]


def main(argv: list[str] | None = None) -> None:
    """`python -m common.stamp_secret FILE`: make a new secret at FILE (for a stamp across
    hosts: once, then copied to every host's data directory as `stamp-secret`)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m common.stamp_secret FILE")
    if not make(args[0]):
        raise SystemExit(f"{args[0]} exists: not replaced")


if __name__ == "__main__":
    main()
