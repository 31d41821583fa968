"""What `stamp job gc` says of disk space (issue 31): what was released, what deleted and
freed, and what waits for the grace period and when a later run reclaims it."""

from __future__ import annotations

import calendar
import json

from spark import gc
from tools.cmd_job import gc_outcome


class Marks:
    """The lock service as spark/gc.py reads its marks."""

    def __init__(self, marks: dict[str, float]) -> None:
        self.value = json.dumps(marks).encode()

    def get(self, key: str) -> tuple[bytes, int] | None:
        assert key == gc.MARKS_KEY
        return self.value, 1


def test_pending_names_the_marked_copies_and_when_they_may_go() -> None:
    found = gc.pending(Marks({"replica:en-1:7": 100.0, "extent:9": 160.0}), grace_s=3600)
    assert found == {"copies": 2, "grace_s": 3600, "reclaim_from": 3700.0,
                     "reclaim_by": 3760.0}
    assert gc.pending(Marks({}), grace_s=60) == {"copies": 0, "grace_s": 60}


def test_the_outcome_says_released_deleted_and_waiting() -> None:
    at = float(calendar.timegm((2026, 11, 28, 10, 0, 0)))
    lines = gc_outcome({"released": 3, "released_bytes": 3 << 20, "done": 2, "bytes": 4096},
                       {"copies": 5, "grace_s": 3600, "reclaim_from": at,
                        "reclaim_by": at + 60}, dry_run=False)
    assert lines == [
        "released: 3 extents (3,145,728 bytes, one replica's worth) dropped from partitions' "
        "streams; they stay on disk until a sweep deletes them once no stream holds them",
        "deleted: 2 extents and copies, 4,096 bytes freed on disk",
        "waiting: 5 unused copies marked, kept for the grace period (jobs.gc_grace_s = 3600 "
        "s); a later 'stamp job gc' reclaims them from 2026-11-28 10:00:00 to 2026-11-28 "
        "10:01:00 UTC"]
    dry = gc_outcome({"would": 4}, {"copies": 0, "grace_s": 60}, dry_run=True)
    assert dry == ["would delete: 4 extents and copies"]
