"""Checks of what a user gives the `stamp` command (issue 15 hole 10): argparse types for
every number, name and spec a subcommand takes, and that the stamp a command talks to runs.

Contract: a bad argument is refused before anything is sent, by argparse (one line, exit 2)
through ArgumentTypeError; a stamp that is not running is a StampError (one line, exit 1,
tools/cli.py) rather than a client retrying against dead ports until its timeout.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.errors import InvalidArgument, NotFound, Unavailable

U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
NAME_BYTES_MAX = 1024  # as partition_layer/requests.py takes an account or log name


def _whole(what: str, low: int, high: int, base: int = 10) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text, base)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} is a whole number, not {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{what} is from {low} to {high}, not {value}")
        return value
    parse.__name__ = what  # argparse names the type in its own messages
    return parse


def checked(check: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """An argparse type from a checker that raises InvalidArgument (frontend/names.py's,
    a parser of durations or permissions...): its message becomes the usage error."""
    def parse(text: str) -> Any:
        try:
            return check(text)
        except InvalidArgument as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = what
    return parse


sequence_number = _whole("a sequence number", 0, U64_MAX)
record_count = _whole("a record count", 1, U32_MAX)
partition_id = _whole("a partition id", 0, U64_MAX)
byte_offset = _whole("a byte offset", 0, U64_MAX)
byte_length = _whole("a byte length", 1, U32_MAX)
fragment_count = _whole("a fragment count", 1, 255)
extent_id = _whole("an extent id (decimal or 0x...)", 0, U64_MAX, base=0)
megabytes = _whole("a size in MB", 1, 1_000_000)
seed = _whole("a seed", 0, U64_MAX)
writer_count = _whole("a writer count", 1, 64)


def name(text: str) -> str:
    """A log, account, stream or process name: 1..NAME_BYTES_MAX bytes, no NUL or newline."""
    if not text:
        raise argparse.ArgumentTypeError("a name is not empty")
    if len(text.encode(errors="surrogateescape")) > NAME_BYTES_MAX:
        raise argparse.ArgumentTypeError(f"a name has at most {NAME_BYTES_MAX} bytes")
    if any(c in text for c in "\x00\n\r"):
        raise argparse.ArgumentTypeError(f"a name has no NUL or line break: {text!r}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"a name is valid UTF-8: {text!r}") from None
    return text


def fault_spec(text: str) -> str:
    """name=action[:arg][,after=N][,times=N]; ... as common/faults.py parses it."""
    from common import faults

    try:
        for point, action, *_ in faults.parse(text):
            if action not in faults.ACTIONS:
                raise InvalidArgument(f"unknown fault action {action!r} for {point}; one "
                                      f"of {', '.join(faults.ACTIONS)}")
    except (InvalidArgument, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def require_running(data_dir: str, kind: str) -> None:
    """Refuse at once when no `kind` process of the stamp in `data_dir` is alive."""
    from tools.local_stamp import LocalStamp

    stamp = LocalStamp.load(data_dir)
    names = [rec.name for rec in stamp.records.values() if rec.kind == kind]
    if not names:
        raise NotFound(f"the stamp in {Path(data_dir).resolve()} has no {kind} processes")
    if not any(stamp.alive(n) for n in names):
        raise Unavailable(f"the stamp in {Path(data_dir).resolve()} is not running (no "
                          f"{kind} is alive): start it with 'stamp up'")
