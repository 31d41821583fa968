"""The history checker (tools/chaos/check.py) can fail: the mixed workload runs against an
in-memory stamp that keeps its promises, and the checker finds nothing; then the same stamp
is made to break one promise at a time — an acknowledged append lost, a record applied
twice, two records reordered, a stale ETag accepted, an entity gone back, a subscriber fed a
record twice — and the checker names exactly that."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest
from stampsdk.errors import NotFound, PreconditionFailed, Unavailable

from tools.chaos.check import (
    find_violations,
    follower_violations,
    linearizability_violations,
    record_final_state,
)
from tools.chaos.followers import Reader, Subscriber, scan_violations
from tools.chaos.history import OpLog, WriterHistory, entity_key, record_bytes, row_key
from tools.chaos.linearizability import Op
from tools.chaos.workload import MixedWorkload, Tally


class MemoryStamp:
    """Logs and entities in dicts, with the SDK's calls; `stale_etags_accepted` makes it
    ignore if_match; `fail_every` fails every Nth mutation after applying it (in doubt)."""

    def __init__(self, stale_etags_accepted: bool = False, fail_every: int = 0,
                 half_batches: bool = False, stale_gets: bool = False,
                 stale_tails: bool = False) -> None:
        self.logs: dict[str, list[bytes]] = {}
        self.rows: dict[tuple[str, bytes], tuple[bytes, str]] = {}
        self.tokens: dict[str, int] = {}
        self.etags = itertools.count(1)
        self.stale_etags_accepted = stale_etags_accepted
        self.fail_every = fail_every
        self.half_batches = half_batches  # a batch applies its first op only, in doubt
        self.stale_gets = stale_gets  # a get answers the row's value before its last put
        self.stale_tails = stale_tails  # a read of a log's tail misses its last record
        self.before: dict[tuple[str, bytes], tuple[bytes, str]] = {}
        self.mutations = 0

    def _maybe_fail(self) -> None:
        self.mutations += 1
        if self.fail_every and self.mutations % self.fail_every == 0:
            raise Unavailable("in doubt: applied, but the answer was lost")

    def append(self, log: str, records: Sequence[bytes], token: str | None = None) -> int:
        if token is not None and token in self.tokens:
            return self.tokens[token]  # a retry: the first answer, applied once
        records_of = self.logs.setdefault(log, [])
        first = len(records_of)
        records_of.extend(records)
        if token is not None:
            self.tokens[token] = first
        self._maybe_fail()
        return first

    def read(self, log: str, from_seq: int = 0, limit: int = 1000
             ) -> list[tuple[int, bytes]]:
        records = self.logs.get(log, [])
        if self.stale_tails:
            records = records[:-1]
        return list(enumerate(records))[from_seq:from_seq + limit]

    def peek(self, log: str) -> tuple[int, int]:
        if log not in self.logs:
            raise NotFound(log)
        return 0, len(self.logs[log])

    def put(self, pname: str, row: Any, value: bytes, if_match: str | None = None,
            if_none_match: str | None = None) -> str:
        current = self.rows.get((pname, row))
        if if_match is not None and not self.stale_etags_accepted and \
                (current is None or current[1] != if_match):
            raise PreconditionFailed("etag")
        etag = f"e{next(self.etags)}"
        if current is not None:
            self.before[(pname, row)] = current
        self.rows[(pname, row)] = (value, etag)
        self._maybe_fail()
        return etag

    def get(self, pname: str, row: Any) -> tuple[bytes, str]:
        if (pname, row) not in self.rows:
            raise NotFound(pname)
        if self.stale_gets and (pname, row) in self.before:
            return self.before[(pname, row)]
        return self.rows[(pname, row)]

    def batch(self, pname: str, ops: Sequence[tuple[Any, ...]]) -> list[str]:
        etags = []
        if self.half_batches:
            ops = ops[:1]
        for _, row, value in ops:
            etag = f"e{next(self.etags)}"
            self.rows[(pname, row)] = (value, etag)
            etags.append(etag)
        if self.half_batches:
            raise Unavailable("half a batch applied, the answer lost")
        self._maybe_fail()
        return etags

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryStamp:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def run(stamp: MemoryStamp, steps: int = 600, writers: int = 3, token_retries: int = 0
        ) -> MixedWorkload:
    workload = MixedWorkload(lambda: stamp, writers, seed=5, large_every=0, logs_per_writer=2,
                             cas_every=3, batch_every=5, token_retries=token_retries,
                             tally=Tally(), retry_pause_s=0)
    rng = random.Random(5)
    for i in range(steps):
        workload.step(stamp, workload.histories[i % writers], rng)
    return workload


def only(violations: list[str], *words: str) -> None:
    assert violations, "the checker found nothing"
    assert all(any(w in v for w in words) for v in violations), violations


def test_a_stamp_that_keeps_its_promises_has_no_violation() -> None:
    stamp = MemoryStamp(fail_every=7)  # answers lost now and then: ops in doubt
    workload = run(stamp, token_retries=1)
    verdict = find_violations(stamp, workload.histories)
    assert verdict.violations == []
    assert verdict.checked["records"] > 500 and verdict.checked["entities"] > 10
    assert sum(h.errors for h in workload.histories) > 0  # doubt was exercised
    assert workload.tally.ok["append_retried"] > 0  # and a retry with its token


def test_a_lost_acknowledged_append_is_found() -> None:
    stamp = MemoryStamp()
    workload = run(stamp)
    log = workload.histories[0].log
    stamp.logs[log][3] = stamp.logs[log][3][:0] + b"w0-n999999|"  # the record is gone
    only(find_violations(stamp, workload.histories).violations, "never written", "lost")
    del stamp.logs[log][-1]  # the last record vanishes too: lost, not changed
    assert any("lost" in v for v in find_violations(stamp, workload.histories).violations)


def test_a_record_applied_twice_is_found() -> None:
    stamp = MemoryStamp()
    workload = run(stamp)
    log = workload.histories[1].log
    stamp.logs[log].append(stamp.logs[log][0])  # a retry applied a second time
    only(find_violations(stamp, workload.histories).violations, "appears twice")


def test_a_record_applied_twice_by_a_retry_without_its_token_is_found() -> None:
    stamp = MemoryStamp(fail_every=7)
    stamp.tokens = _Forgetful()  # the stamp forgets tokens: a retry is applied again
    workload = run(stamp, token_retries=1)
    only(find_violations(stamp, workload.histories).violations, "appears twice")


def test_reordered_records_are_found() -> None:
    stamp = MemoryStamp()
    workload = run(stamp)
    log = workload.histories[2].log
    records = stamp.logs[log]
    records[1], records[2] = records[2], records[1]
    violations = find_violations(stamp, workload.histories).violations
    only(violations, "reordered")
    assert len(violations) == 2


def test_a_stale_etag_accepted_is_found() -> None:
    stamp = MemoryStamp(stale_etags_accepted=True)
    workload = run(stamp)
    only(find_violations(stamp, workload.histories).violations, "stale ETag")


def test_an_entity_gone_back_to_an_older_value_is_found() -> None:
    stamp = MemoryStamp()
    h = WriterHistory(0, "log-0", "group-0")
    h.value_acked(1, 5, "e1")
    h.value_acked(1, 9, "e2")
    stamp.rows[("group-0", row_key(1))] = (record_bytes(0, 5, 40), "e1")
    only(find_violations(stamp, [h]).violations, "went back")
    del stamp.rows[("group-0", row_key(1))]
    only(find_violations(stamp, [h]).violations, "lost")


def test_a_subscriber_fed_twice_out_of_order_or_a_vanished_record_is_found() -> None:
    log = [(0, b"a"), (1, b"b"), (2, b"c")]
    assert follower_violations("l", log, log) == []
    only(follower_violations("l", [log[0], log[0], log[1], log[2]], log), "once each")
    only(follower_violations("l", [log[1], log[0], log[2]], log), "once each")
    only(follower_violations("l", [*log, (3, b"d")], log), "not in the log")
    only(follower_violations("l", log[1:], log), "first record")  # started late
    only(follower_violations("l", log[:2], log), "end")  # never caught up
    only(follower_violations("l", [], log), "end")
    stamp = MemoryStamp()
    workload = run(stamp)
    sub = Subscriber(lambda: stamp, workload.histories[0].log, Tally())
    records = list(enumerate(stamp.logs[sub.log]))
    sub.seen = [records[0], *records[2:]]  # a gap
    only(find_violations(stamp, workload.histories, [sub]).violations, "once each")


def test_a_batch_in_doubt_applied_to_some_rows_only_is_found() -> None:
    stamp = MemoryStamp(half_batches=True)
    workload = run(stamp)
    assert sum(h.errors for h in workload.histories) > 0
    only(find_violations(stamp, workload.histories).violations, "half")


@pytest.mark.parametrize("stale", ["", "gets", "tails"])
def test_reads_racing_the_writers_are_checked_for_linearizability(stale: str) -> None:
    stamp = MemoryStamp(fail_every=9, stale_gets=stale == "gets", stale_tails=stale == "tails")
    workload = MixedWorkload(lambda: stamp, 2, seed=4, large_every=0, logs_per_writer=2,
                             cas_every=3, batch_every=5, tally=Tally(), retry_pause_s=0)
    reader = Reader(lambda: stamp, workload.histories, workload.oplog, Tally(), 4, "r")
    rng = random.Random(4)
    for i in range(300):
        workload.step(stamp, workload.histories[i % 2], rng)
        reader.read_once(stamp)
    stamp.stale_gets = stamp.stale_tails = False  # only the racing reads were stale
    record_final_state(stamp, workload.histories, workload.oplog)
    found = linearizability_violations(workload.oplog)
    assert found.checked["keys"] > 10 and found.checked["ops"] > 500
    assert found.undecided == []
    if stale:
        only(found.violations, "not linearizable")
    else:
        assert found.violations == []


def test_a_scan_out_of_order_or_with_foreign_bytes_is_found() -> None:
    h = WriterHistory(0, "log-0", "group-0", issued=10)
    good = [("group-0", b"\x00\x01", record_bytes(0, 3, 30)),
            ("group-0", b"\x00\x02", record_bytes(0, 4, 30))]
    assert scan_violations(good, {"group-0": h}.get) == []
    only(scan_violations(good[::-1], {"group-0": h}.get), "out of order")
    only(scan_violations([("group-0", b"\x00", b"garbage")], {"group-0": h}.get), "no writer")
    only(scan_violations([("group-0", b"\x00", record_bytes(0, 11, 30))], {"group-0": h}.get),
         "never written")


class _Forgetful(dict):  # type: ignore[type-arg]
    def __contains__(self, key: object) -> bool:
        return False


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_workload_is_seeded(seed: int) -> None:
    def numbers(stamp: MemoryStamp) -> dict[str, list[bytes]]:
        workload = MixedWorkload(lambda: stamp, 2, seed=seed, large_every=0, cas_every=3,
                                 batch_every=5, tally=Tally())
        rng = random.Random(seed)
        for i in range(100):
            workload.step(stamp, workload.histories[i % 2], rng)
        return stamp.logs
    assert numbers(MemoryStamp()) == numbers(MemoryStamp())


def test_a_batch_in_doubt_seen_on_one_row_is_done_on_all_of_them_by_then() -> None:
    oplog = OpLog(started=0.0)
    a, b = entity_key("group-0", 1), entity_key("group-0", 2)
    oplog.ops += [Op(a, ("put", "old-a", None, None), 0.0, 1.0, ("ok", "e1")),
                  Op(b, ("put", "old-b", None, None), 0.0, 1.0, ("ok", "e2")),
                  Op(a, ("put", "batch", None, None), 2.0, None),
                  Op(b, ("put", "batch", None, None), 2.0, None),
                  Op(a, ("get",), 3.0, 4.0, ("value", "batch", "e3"))]
    oplog.batch_in_doubt("w0-n9", [a, b], "batch", 2.0)
    assert linearizability_violations(oplog).violations == []  # b may not be read yet
    oplog.ops.append(Op(b, ("get",), 5.0, 6.0, ("value", "old-b", "e2")))  # half applied
    only(linearizability_violations(oplog).violations, "not linearizable")
