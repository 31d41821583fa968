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


# ---- ec: which extents, and the stream policies behind it -------------------------------


def test_policy_exact_name_first_then_longest_pattern() -> None:
    from stream_layer.stream_manager.policies import policy_for
    from stream_layer.stream_manager.records import StreamPolicy

    policies = {p.pattern: p for p in (StreamPolicy("p-*", 6, 3, 0),
                                       StreamPolicy("p-*.rows", 4, 2, 0),
                                       StreamPolicy("p-7.rows", 3, 2, 0))}
    assert policy_for("p-7.rows", policies).pattern == "p-7.rows"
    assert policy_for("p-8.rows", policies).pattern == "p-*.rows"
    assert policy_for("p-8.log", policies).pattern == "p-*"
    assert policy_for("other", policies) is None


def test_ec_candidates_are_due_sealed_extents_and_unfinished_conversions() -> None:
    from spark.ec import ExtentView, ec_candidates
    from stream_layer.stream_manager.records import StreamPolicy

    now = 10_000.0
    policies = {"rows": StreamPolicy("rows", 6, 3, 600), "blobs": StreamPolicy("blobs", 3, 2, 0)}
    extents = [
        ExtentView(1, "sealed", now - 601, ("rows",), 3),      # due
        ExtentView(2, "sealed", now - 10, ("rows",), 3),       # not yet
        ExtentView(3, "open", 0, ("rows",), 3),                # still written
        ExtentView(4, "sealed", now - 10, ("log",), 3),        # no policy
        ExtentView(5, "sealed", 0, ("rows",), 3),              # sealed before seal times
        ExtentView(6, "erasure_coded", now, ("log",), 2, 3, 2),  # replicas left: finish
        ExtentView(7, "erasure_coded", now, ("rows",), 0, 6, 3),  # done
        ExtentView(8, "sealed", now - 10, ("blobs", "rows"), 3),  # shared: blobs is due
    ]
    assert ec_candidates(extents, policies, now) == [(1, 6, 3), (5, 6, 3), (6, 3, 2),
                                                     (8, 3, 2)]


def test_set_stream_policy_in_the_state_machine() -> None:
    import pytest

    from common.errors import InvalidArgument, NotFound
    from stream_layer.stream_manager import state as s

    st = s.StreamManagerState()
    st.apply(s.SetStreamPolicy("p-*.rows", 6, 3, 600.0))
    assert st.policies["p-*.rows"] == s.StreamPolicy("p-*.rows", 6, 3, 600.0)
    restored = s.StreamManagerState.from_snapshot(st.to_snapshot())
    assert restored.policies == st.policies and restored.digest() == st.digest()
    with pytest.raises(InvalidArgument):
        st.apply(s.SetStreamPolicy("x", 200, 100, 0))
    st.apply(s.SetStreamPolicy("p-*.rows", 0, 0, 0))
    assert st.policies == {}
    with pytest.raises(NotFound):
        st.apply(s.SetStreamPolicy("p-*.rows", 0, 0, 0))


def test_seal_time_is_recorded_from_the_command() -> None:
    from stream_layer.stream_manager import state as s

    st = s.StreamManagerState()
    st.apply(s.RegisterNode("en-1", "a:1", "fd-1", "ud-1", 0))
    st.apply(s.CreateStream("log"))
    first, _ = st.apply(s.ReserveExtentIds(1))
    st.apply(s.AddExtent("log", first, ("en-1",), expect_last=0))
    assert st.apply(s.SealExtent(first, 10, at=1234.5)).sealed_at == 1234.5


def test_ec_and_duration_arguments() -> None:
    import argparse

    import pytest

    from tools.cmd_stream_policy import duration_s, ec_code

    assert ec_code("6+3") == (6, 3) and ec_code(" 3 + 2 ") == (3, 2)
    assert duration_s("10m") == 600 and duration_s("90") == 90 and duration_s("1.5h") == 5400
    for bad in ("6", "0+3", "200+100"):
        with pytest.raises(argparse.ArgumentTypeError):
            ec_code(bad)
    with pytest.raises(argparse.ArgumentTypeError):
        duration_s("10 minutes")


def test_default_policies_code_partition_row_and_blob_data() -> None:
    from common.config import JobLimits
    from spark.ec import DEFAULT_CODE, ExtentView, default_policies, ec_candidates

    policies = default_policies(JobLimits(ec_default_after_s=60))
    extents = [ExtentView(1, "sealed", 100, ("partition/3/row",), 3),
               ExtentView(2, "sealed", 100, ("partition/3/blob",), 3),
               ExtentView(3, "sealed", 100, ("partition/3/log",), 3),
               ExtentView(4, "sealed", 150, ("partition/4/row",), 3)]
    assert ec_candidates(extents, policies, now=200) == [(1, DEFAULT_CODE, DEFAULT_CODE),
                                                         (2, DEFAULT_CODE, DEFAULT_CODE)]
    assert default_policies(JobLimits(ec_default_patterns=())) == {}


def test_gc_waits_out_its_grace_within_one_run_only_when_told() -> None:
    """jobs.gc_wait_grace_max_s 0 (the default) never waits, whatever the grace (a grace of
    0 included: its first run only marks); a grace within the bound adds a sweep after it."""
    import dataclasses

    from common.config import JobLimits, default_config
    from spark.driver import StampAddresses, _stages

    def stages(dry_run: bool = False, **jobs: float) -> list[tuple[str, float]]:
        config = dataclasses.replace(default_config(), jobs=JobLimits(**jobs))
        return _stages("gc", StampAddresses(["sm"], ["lock"], None, config), dry_run)

    assert stages(gc_grace_s=0) == [("gc-release", 0.0), ("gc", 0.0)]
    assert stages(gc_grace_s=2, gc_wait_grace_max_s=10) == [
        ("gc-release", 0.0), ("gc", 0.0), ("gc", 2)]
    assert stages(True, gc_grace_s=2, gc_wait_grace_max_s=10) == [
        ("gc-release", 0.0), ("gc", 0.0)]
    assert stages(gc_grace_s=60, gc_wait_grace_max_s=10)[-1] == ("gc", 0.0)
