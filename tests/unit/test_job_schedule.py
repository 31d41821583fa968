"""The job scheduler's decisions (spark/schedule.py), pure, on an injected time: what is due
when, given the schedules, the record of earlier runs and what was observed of the stamp;
scrub's slices and backlog; `stamp job schedule --set` parsing."""

from __future__ import annotations

import dataclasses

import pytest

from common.config import JobLimits
from common.errors import InvalidArgument
from spark.ec import ExtentView
from spark.schedule import (
    EC,
    GC,
    NOTHING_DUE,
    SCRUB,
    JobRecord,
    Observed,
    SchedulerState,
    Schedules,
    ScrubCursor,
    ScrubExtent,
    due_now,
    ec_next_due,
    format_duration,
    next_due,
    parse_setting,
    recorded,
    scrub_overdue,
    scrub_slice,
    started,
    wake_at,
)
from stream_layer.stream_manager.records import StreamPolicy

T0 = 1_000_000.0
HOUR, DAY = 3600.0, 86400.0


def schedules(**changes: float) -> Schedules:
    base = Schedules(gc_interval_s=1800, ec_interval_s=300, scrub_interval_s=HOUR,
                     scrub_period_s=7 * DAY, scrub_bytes_per_s_max=0, gc_grace_s=HOUR)
    return dataclasses.replace(base, **changes)


def fresh(now: float = T0) -> SchedulerState:
    return started(SchedulerState(), now)


def test_a_fresh_schedule_runs_nothing_at_once_then_each_job_after_its_interval() -> None:
    state, s, seen = fresh(), schedules(), Observed()
    assert due_now(state, s, seen, T0) is None
    assert due_now(state, s, seen, T0 + 299) is None
    assert due_now(state, s, seen, T0 + 300) == EC
    state = recorded(state, EC, T0 + 300, 0.1, "ok", ran=False)
    assert due_now(state, s, seen, T0 + 599) is None
    no_ec = schedules(ec_interval_s=0)
    assert due_now(state, no_ec, seen, T0 + 1799) is None
    assert due_now(state, no_ec, seen, T0 + 1800) == GC
    assert due_now(state, no_ec, seen, T0 + 3600) == GC  # due first, so before scrub


def test_keeping_the_schedule_again_keeps_its_start() -> None:
    state = fresh(T0)
    assert started(state, T0 + 50).kept_since == T0


def test_of_several_due_the_one_due_first_runs_first() -> None:
    state, s, seen = fresh(), schedules(), Observed()
    # At T0 + 2 h all three are due; ec was due first (T0 + 300), then gc, then scrub.
    assert due_now(state, s, seen, T0 + 2 * HOUR) == EC
    state = recorded(state, EC, T0 + 2 * HOUR, 1.0, "ok")
    assert due_now(state, s, seen, T0 + 2 * HOUR) == GC
    state = recorded(state, GC, T0 + 2 * HOUR, 1.0, "ok")
    assert due_now(state, s, seen, T0 + 2 * HOUR) == SCRUB


def test_gc_runs_when_its_marks_come_due_without_waiting_for_the_interval() -> None:
    state = recorded(fresh(), GC, T0, 5.0, "ok")
    seen = Observed(gc_reclaim_at=T0 + 600)  # marked by that run, grace 600 s
    assert next_due(GC, state, schedules(), seen) == T0 + 600
    assert due_now(state, schedules(ec_interval_s=0), seen, T0 + 600) == GC


def test_marks_the_last_run_could_not_sweep_wait_for_the_interval() -> None:
    # A copy on a silent node keeps its old mark: gc must not run back to back for it.
    state = recorded(fresh(), GC, T0 + 1000, 5.0, "ok")
    seen = Observed(gc_reclaim_at=T0 + 900)
    assert next_due(GC, state, schedules(), seen) == T0 + 1000 + 1800


def test_trimmed_space_comes_back_within_interval_plus_grace() -> None:
    """Trim at any moment; the next gc releases and marks; the marks' end of grace wakes
    the run that sweeps: the whole within interval + grace (1.5x the grace by default)."""
    s = schedules(ec_interval_s=0, scrub_interval_s=0)
    for trim_at in (T0 + 1, T0 + 900, T0 + 1799):
        state, seen, now = fresh(), Observed(), trim_at
        marked_at = None
        while True:
            job = due_now(state, s, seen, now)
            if job is None:
                now = wake_at(state, s, seen, now, poll_s=10 * DAY)
                continue
            if marked_at is not None and now >= marked_at + s.gc_grace_s:
                break  # this run sweeps what was trimmed
            state = recorded(state, GC, now, 1.0, "ok")
            if now >= trim_at and marked_at is None:
                marked_at = now
                seen = Observed(gc_reclaim_at=marked_at + s.gc_grace_s)
        assert now - trim_at <= s.gc_interval_s + s.gc_grace_s


def test_an_off_schedule_is_never_due() -> None:
    state, seen = fresh(), Observed(gc_reclaim_at=T0 + 1, ec_next_due_at=T0 + 1)
    off = schedules(gc_interval_s=0, ec_interval_s=0, scrub_interval_s=0)
    assert [next_due(job, state, off, seen) for job in (GC, EC, SCRUB)] == [None] * 3
    assert due_now(state, off, seen, T0 + 365 * DAY) is None
    assert wake_at(state, off, seen, T0, poll_s=10.0) == T0 + 10.0


def test_ec_wakes_when_the_next_policy_comes_due() -> None:
    state = recorded(fresh(), EC, T0, 0.0, "ok", ran=False)
    seen = Observed(ec_next_due_at=T0 + 42)
    assert next_due(EC, state, schedules(), seen) == T0 + 42
    assert wake_at(state, schedules(), seen, T0 + 1, poll_s=60) == T0 + 42


def test_the_idle_wake_is_bounded_by_the_poll_for_schedule_changes() -> None:
    assert wake_at(fresh(), schedules(), Observed(), T0, poll_s=10.0) == T0 + 10.0
    assert wake_at(fresh(), schedules(), Observed(), T0 + 295, poll_s=10.0) == T0 + 300


def test_an_ec_check_without_work_is_a_successful_look_not_a_run() -> None:
    state = recorded(fresh(), EC, T0, 3.0, "ok")
    state = recorded(state, EC, T0 + 300, 0.05, "ok", ran=False)
    record = state.job(EC)
    assert record == JobRecord(last_run_at=T0 + 300, last_result=NOTHING_DUE,
                               last_success_at=T0 + 300, last_seconds=3.0, runs=1)


def test_a_failed_run_keeps_the_last_success() -> None:
    state = recorded(fresh(), GC, T0, 3.0, "ok")
    state = recorded(state, GC, T0 + 1800, 4.0, "failed: Unavailable: no leader")
    record = state.job(GC)
    assert record.last_success_at == T0 and record.last_result.startswith("failed")
    assert record.runs == 2


def test_the_state_round_trips_and_ignores_fields_it_does_not_know() -> None:
    state = recorded(fresh(), SCRUB, T0, 2.0, "ok")
    state = dataclasses.replace(state, scrub=ScrubCursor(17, T0, T0 - DAY, 12))
    raw = state.to_dict()
    raw["jobs"][SCRUB]["from_a_newer_version"] = 1
    raw["unknown"] = True
    assert SchedulerState.from_dict(raw) == state


def test_ec_next_due_is_the_soonest_future_policy_time() -> None:
    policies = {"logs/*": StreamPolicy("logs/*", 6, 3, 600.0),
                "fast/*": StreamPolicy("fast/*", 6, 3, 60.0)}
    extents = [ExtentView(1, "sealed", T0 - 1000, ("logs/a",), 3),   # due already
               ExtentView(2, "sealed", T0 - 100, ("logs/a",), 3),    # due at T0 + 500
               ExtentView(3, "sealed", T0 - 10, ("fast/b",), 3),     # due at T0 + 50
               ExtentView(4, "open", T0, ("fast/b",), 3),            # not sealed
               ExtentView(5, "sealed", T0 - 10, ("other",), 3)]      # no policy
    assert ec_next_due(extents, policies, T0) == T0 + 50
    assert ec_next_due(extents[:2], policies, T0) == T0 + 500
    assert ec_next_due(extents[:1], policies, T0) is None


# ---- scrub ----------------------------------------------------------------------------------

def extents(count: int, nbytes: int = 100, first: int = 1) -> list[ScrubExtent]:
    return [ScrubExtent(i, nbytes) for i in range(first, first + count)]


def test_a_pass_covers_every_extent_within_the_period_in_even_slices() -> None:
    s = schedules(scrub_period_s=10 * HOUR, scrub_interval_s=HOUR)
    stamp = extents(45)
    cursor, now, seen = ScrubCursor(), T0, set()
    sizes = []
    while True:
        piece = scrub_slice(stamp, cursor, s, now)
        if piece is None or piece.cursor.pass_started_at != (cursor.pass_started_at or now):
            break
        seen |= {e.extent_id for e in stamp if piece.first <= e.extent_id <= piece.last}
        sizes.append(piece.extents)
        cursor, now = piece.cursor, now + HOUR
        if len(seen) == len(stamp):
            break
    assert seen == set(range(1, 46))
    assert now - T0 <= s.scrub_period_s
    assert max(sizes) - min(sizes) <= 1  # spread evenly: 5 a run over 9 runs


def test_a_finished_pass_waits_for_its_period_then_starts_again_from_the_first() -> None:
    s = schedules(scrub_period_s=10 * HOUR, scrub_interval_s=HOUR)
    done = ScrubCursor(cursor=5, pass_started_at=T0)
    assert scrub_slice(extents(5), done, s, T0 + 3 * HOUR) is None
    again = scrub_slice(extents(5), done, s, T0 + 9 * HOUR)
    assert again is not None and again.first == 1
    assert again.cursor.pass_started_at == T0 + 9 * HOUR
    assert (again.cursor.prev_pass_started_at, again.cursor.prev_pass_end) == (T0, 5)


def test_extents_made_during_a_pass_are_verified_in_it() -> None:
    s = schedules(scrub_period_s=10 * HOUR, scrub_interval_s=HOUR)
    cursor = ScrubCursor(cursor=5, pass_started_at=T0)
    piece = scrub_slice(extents(5) + extents(2, first=6), cursor, s, T0 + HOUR)
    assert piece is not None and (piece.first, piece.cursor.pass_started_at) == (6, T0)


def test_the_rate_bound_caps_a_slice_but_never_below_one_extent() -> None:
    s = schedules(scrub_period_s=HOUR, scrub_interval_s=HOUR, scrub_bytes_per_s_max=1.0)
    piece = scrub_slice(extents(10, nbytes=1000), ScrubCursor(), s, T0)
    assert piece is not None and piece.extents == 3  # 3600 bytes a slice, 1000 each
    tiny = schedules(scrub_period_s=HOUR, scrub_interval_s=HOUR, scrub_bytes_per_s_max=1e-6)
    piece = scrub_slice(extents(10, nbytes=1000), ScrubCursor(), tiny, T0)
    assert piece is not None and piece.extents == 1


def test_no_extents_no_slice() -> None:
    assert scrub_slice([], ScrubCursor(), schedules(), T0) is None


def test_scrub_backlog_counts_extents_not_verified_within_the_period() -> None:
    period = 7 * DAY
    cursor = ScrubCursor(cursor=10, pass_started_at=T0 - 2 * DAY,
                         prev_pass_started_at=T0 - 9 * DAY, prev_pass_end=15)
    stamp = [ScrubExtent(5, 1),                      # this pass: 2 days ago
             ScrubExtent(12, 1),                     # the last pass: 9 days ago, overdue
             ScrubExtent(20, 1, sealed_at=T0 - DAY),  # never, sealed a day ago
             ScrubExtent(21, 1, sealed_at=T0 - 8 * DAY)]  # never, sealed 8 days ago
    assert scrub_overdue(stamp, cursor, period, T0) == 2


# ---- `--set` ----------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("gc=10m", ("schedule_gc_interval_s", 600.0)),
    ("ec=90", ("schedule_ec_interval_s", 90.0)),
    ("scrub=off", ("schedule_scrub_interval_s", 0.0)),
    ("scrub-period=1w", ("schedule_scrub_period_s", 7 * DAY)),
    ("scrub-period=1.5d", ("schedule_scrub_period_s", 1.5 * DAY)),
    ("scrub-rate=16MiB", ("scrub_bytes_per_s_max", 16 * 1024.0 ** 2)),
    ("scrub-rate=512k/s", ("scrub_bytes_per_s_max", 512 * 1024.0)),
    (" GC = 2H ", ("schedule_gc_interval_s", 7200.0)),
])
def test_settings_parse(text: str, expected: tuple[str, float]) -> None:
    assert parse_setting(text) == expected


@pytest.mark.parametrize("text, says", [
    ("gc", "NAME=VALUE"), ("gc=", "NAME=VALUE"), ("backup=1h", "no schedule named"),
    ("gc=10 minutes", "a duration"), ("gc=-5m", "at least 0"), ("gc=abc", "a duration"),
    ("scrub-period=off", "positive"), ("scrub-rate=fast", "a rate"), ("ec=infm", "a duration"),
])
def test_bad_settings_say_why_in_one_line(text: str, says: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse_setting(text)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_overrides_apply_to_the_config_and_unknown_ones_are_ignored() -> None:
    limits = JobLimits()
    s = Schedules.of(limits, {"schedule_gc_interval_s": 60, "not_a_schedule": 1})
    assert s.gc_interval_s == 60 and s.ec_interval_s == limits.schedule_ec_interval_s
    assert s.gc_grace_s == limits.gc_grace_s


def test_durations_format_shortly() -> None:
    assert [format_duration(x) for x in (0, 45, 600, 5400, 7 * DAY, 1.5 * DAY)] == [
        "off", "45s", "10m", "1.5h", "1w", "1.5d"]
