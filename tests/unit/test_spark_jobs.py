"""The maintenance jobs' pure parts, without Spark: the scrub's judgement of replicas, the
run totals, and the bounded record of past runs."""

from __future__ import annotations

from spark.job_result import DAMAGED, FAILED, OK, REPAIRED, ItemResult, summarize
from spark.job_runs import RESULT_CHARS_MAX, JobRun, appended, decode, encode
from spark.scrub import ReplicaReport, judge_replicas

LENGTH = 1000
GOOD = b"g" * 32


def sealed(node: str, digest: bytes = GOOD, length: int = LENGTH, **kw: object
           ) -> ReplicaReport:
    return ReplicaReport(node, length, True, digest, **kw)  # type: ignore[arg-type]


def test_three_equal_replicas_are_good() -> None:
    verdict = judge_replicas([sealed("a"), sealed("b"), sealed("c")], LENGTH)
    assert (verdict.good, verdict.bad, verdict.unjudged) == (("a", "b", "c"), (), ())


def test_a_bad_frame_a_wrong_length_and_a_missing_replica_are_bad() -> None:
    verdict = judge_replicas([
        sealed("a"), sealed("b", bad_offset=40, reason="frame at 40: checksum mismatch"),
        sealed("c", length=LENGTH - 8), ReplicaReport("d", missing=True)], LENGTH)
    assert verdict.good == ("a",)
    assert [node for node, _ in verdict.bad] == ["b", "c", "d"]
    assert "frame at 40" in verdict.bad[0][1]


def test_the_minority_digest_is_bad_and_a_tie_is_not_judged() -> None:
    verdict = judge_replicas([sealed("a"), sealed("b", b"x" * 32), sealed("c")], LENGTH)
    assert (verdict.good, [n for n, _ in verdict.bad]) == (("a", "c"), ["b"])
    tie = judge_replicas([sealed("a"), sealed("b", b"x" * 32)], LENGTH)
    assert (tie.good, tie.bad, [n for n, _ in tie.unjudged]) == ((), (), ["a", "b"])


def test_unreachable_and_not_yet_sealed_replicas_are_left_alone() -> None:
    verdict = judge_replicas([
        sealed("a"), ReplicaReport("b", unreachable="connection refused"),
        ReplicaReport("c", 400, False, GOOD), ReplicaReport("d", LENGTH + 5, False, GOOD)],
        LENGTH)
    assert verdict.good == ("a",)
    assert [n for n, _ in verdict.unjudged] == ["b", "c"]
    assert [n for n, _ in verdict.bad] == ["d"]  # unsealed past the sealed length


def test_summary_counts_statuses_and_sums_counters() -> None:
    totals = summarize([ItemResult(1, OK, 3, 100), ItemResult(2, REPAIRED, 3, 50, 1, 1),
                        ItemResult(3, DAMAGED, 5, 10, 2, 1), ItemResult(4, FAILED)])
    assert totals["items"] == 4
    assert (totals[OK], totals[REPAIRED], totals[DAMAGED], totals[FAILED]) == (1, 1, 1, 1)
    assert (totals["copies"], totals["bytes"], totals["found"], totals["fixed"]) == (
        11, 160, 3, 2)
    assert ItemResult.from_dict(ItemResult(2, OK, detail="x").to_dict()) == \
        ItemResult(2, OK, detail="x")


def run(n: int, result: str = "ok") -> JobRun:
    return JobRun("scrub", float(n), 1.0, "local[*]", False, result, {"items": n})


def test_runs_are_bounded_by_count_and_bytes_newest_kept() -> None:
    runs: list[JobRun] = []
    for n in range(30):
        runs = appended(runs, run(n), kept=10, bytes_max=1 << 20)
    assert [r.started_at for r in runs] == [float(n) for n in range(20, 30)]
    assert decode(encode(runs)) == runs
    small = appended(runs, run(99, "failed: " + "x" * 5000), kept=100, bytes_max=2000)
    assert small[-1].started_at == 99.0 and len(small[-1].result) == RESULT_CHARS_MAX
    assert len(encode(small)) <= 2000
    alone = appended([], run(1, "x" * 100), kept=1, bytes_max=10)
    assert [r.started_at for r in alone] == [1.0]  # the new run always stays
