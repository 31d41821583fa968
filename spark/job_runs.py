"""Past runs of the maintenance jobs, kept in the stamp (§7 `stamp job ls`): one value in the
lock service's replicated KV (key `jobs/runs`, JSON), newest last, bounded in count and
size, so a laptop that ran a job and the cluster that ran the next see the same list.

Contract: `appended` is the pure bounding rule (unit-tested); `RunStore.add` writes with
compare-and-set, so two jobs finishing at once both land."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from common.config import JobLimits
from common.errors import Unavailable
from lock_service.client import LockClient

RUNS_KEY = "jobs/runs"
RESULT_CHARS_MAX = 400
WRITE_ATTEMPTS_MAX = 8  # compare-and-set retries against a concurrent writer


@dataclass(frozen=True)
class JobRun:
    job: str                       # scrub | ec | gc
    started_at: float              # unix seconds
    seconds: float
    master: str
    dry_run: bool
    result: str                    # ok | failed: why
    totals: dict[str, int] = field(default_factory=dict)  # job_result.summarize

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> JobRun:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


def encode(runs: Sequence[JobRun]) -> bytes:
    return json.dumps([r.to_dict() for r in runs]).encode()


def decode(raw: bytes) -> list[JobRun]:
    return [JobRun.from_dict(r) for r in json.loads(raw)]


def appended(runs: Sequence[JobRun], run: JobRun, kept: int, bytes_max: int) -> list[JobRun]:
    """`runs` with `run` last; the oldest dropped beyond `kept` runs or `bytes_max` encoded
    bytes (the new run always stays, its result cut to RESULT_CHARS_MAX)."""
    assert kept > 0
    if len(run.result) > RESULT_CHARS_MAX:
        run = replace(run, result=run.result[:RESULT_CHARS_MAX - 3] + "...")
    result = [*runs, run][-kept:]
    while len(result) > 1 and len(encode(result)) > bytes_max:
        result = result[1:]
    return result


class RunStore:
    """The runs in the lock service (blocking calls)."""

    def __init__(self, locks: LockClient, limits: JobLimits) -> None:
        self.locks = locks
        self.limits = limits

    def read(self) -> list[JobRun]:
        found = self.locks.get(RUNS_KEY)
        return [] if found is None else decode(found[0])

    def add(self, run: JobRun) -> None:
        for _ in range(WRITE_ATTEMPTS_MAX):
            found = self.locks.get(RUNS_KEY)
            runs, version = ([], 0) if found is None else (decode(found[0]), found[1])
            raw = encode(appended(runs, run, self.limits.runs_kept, self.limits.runs_bytes_max))
            if self.locks.compare_and_set(RUNS_KEY, version, raw) is not None:
                return
        raise Unavailable(f"the job runs changed {WRITE_ATTEMPTS_MAX} times while adding one")
