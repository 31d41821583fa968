"""A deposed primary's tail (issue 30): the operations a stamp took for an account and never
shipped before an unplanned failover made another stamp the account's primary. They are
kept aside here, in a report the operator reads (`stamp location tail NAME`), never merged
into the new primary silently.

Contracts:
- `set_aside` appends one JSON line per request (a ReplicateOp as the shipper would have
  sent it: one partition name's rows, squashed over the operations of one batch) to
  `<directory>/geo-tails/<account>.jsonl`, and returns once it is durable (fsync, and the
  directory's on creation). Only then does the shipper count those operations as shipped.
- A shipper that sets a batch aside again (a retry, or a new owner reading the log again)
  writes its lines again: `read_tail` keeps one line per (partition, LSN, name).
- Each line: account, pname, partition, lsn (the batch's last operation), primary and epoch
  (the placement that deposed this stamp), at_s (wall time), rows (how many), request
  (base64 of the serialized partition.proto Request: every row with its value).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from common import durable_fs
from common.errors import Unavailable
from common.proto import partition_pb2 as pb
from frontend.names import check_account

TAIL_DIR = "geo-tails"


@dataclass(frozen=True)
class Deposed:
    """The location names another primary for an account this stamp took writes for, at an
    epoch past this stamp's: its unshipped operations are a tail (module docstring)."""

    primary: str
    epoch: int


async def never_deposed(partition_id: int, lsn: int,
                        entries: list[tuple[Deposed, pb.Request]]) -> None:
    """Where a shipper has nowhere to set a tail aside: it waits (nothing is dropped)."""
    raise Unavailable(f"partition {partition_id} has nowhere to set a deposed tail aside")


def tail_path(directory: Path, account: str) -> Path:
    return directory / TAIL_DIR / f"{check_account(account)}.jsonl"


class TailReport:
    """One partition server's tail reports, under its directory (module contract)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.set_aside_count = 0

    async def set_aside(self, partition_id: int, lsn: int,
                        entries: list[tuple[Deposed, pb.Request]]) -> None:
        by_account: dict[str, list[bytes]] = {}
        now = time.time()
        for deposed, request in entries:
            line = {"account": request.account, "pname": request.pname,
                    "partition": partition_id, "lsn": lsn, "primary": deposed.primary,
                    "epoch": deposed.epoch, "at_s": now,
                    "rows": len(request.replicate.rows),
                    "request": base64.b64encode(request.SerializeToString()).decode()}
            by_account.setdefault(request.account, []).append(
                json.dumps(line, sort_keys=True).encode() + b"\n")
        for account, lines in by_account.items():
            await asyncio.to_thread(self._append, tail_path(self.directory, account), lines)
        self.set_aside_count += len(entries)

    @staticmethod
    def _append(path: Path, lines: list[bytes]) -> None:
        created = not path.exists()
        durable_fs.make_dirs(path.parent)
        with open(path, "ab") as out:
            out.write(b"".join(lines))
            out.flush()
            os.fsync(out.fileno())
        if created:
            durable_fs.fsync_dir(path.parent)


def read_tail(directory: Path, account: str) -> list[dict[str, object]]:
    """The lines set aside for `account` under `directory`, one per (partition, LSN, name),
    in the order written; a torn last line (a crash while writing: its batch was not counted
    as shipped, so it is written again) is skipped."""
    path = tail_path(directory, account)
    if not path.exists():
        return []
    seen: dict[tuple[object, object, object], dict[str, object]] = {}
    for raw in path.read_bytes().splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        seen.setdefault((line["partition"], line["lsn"], line["pname"]), line)
    return list(seen.values())


def request_of(line: dict[str, object]) -> pb.Request:
    """The Request a tail line holds (its rows, as the new primary would have received
    them)."""
    return pb.Request.FromString(base64.b64decode(str(line["request"])))
