"""spark/datasource_plan.py and spark.stream.capped: how a read is cut into Spark partitions
and what pushed filters leave of it (pure; no stamp, no Spark)."""

from __future__ import annotations

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from spark.datasource_plan import (
    EntityPiece,
    LogSpan,
    Narrowing,
    cut_spans,
    entity_pieces,
    log_partitions,
    name_after,
)
from spark.stream import capped

RANGES = [EntityPiece(None, ("g03", b""), 1), EntityPiece(("g03", b""), ("g06", b""), 2),
          EntityPiece(("g06", b""), None, 3)]


def test_entity_pieces_cut_the_read_at_partition_bounds() -> None:
    assert entity_pieces(RANGES, None, None) == RANGES
    assert entity_pieces(RANGES, ("g04", b""), ("g07", b"")) == [
        EntityPiece(("g04", b""), ("g06", b""), 2), EntityPiece(("g06", b""), ("g07", b""), 3)]
    assert entity_pieces(RANGES, ("g04", b""), ("g05", b"")) == [
        EntityPiece(("g04", b""), ("g05", b""), 2)]
    assert entity_pieces(RANGES, ("g05", b""), ("g05", b"")) == []


def test_name_after_is_the_next_valid_name() -> None:
    assert name_after("g04") == "g04-0"
    assert "g04" < "g04-0" < "g04-a" < "g040" and name_after("g04-0") == "g04-0-0"
    assert name_after("x" * 62) is None  # no room within 63 characters


def test_log_spans_pack_by_range_partition_and_cut_big_logs() -> None:
    spans = [LogSpan("log-a", 0, 120), LogSpan("log-b", 5, 12), LogSpan("log-x", 0, 90),
             LogSpan("log-e", 3, 3)]
    groups = log_partitions(spans, [("log-m", b"")], records_per_partition=50)
    assert [[(s.log, s.from_seq, s.to_seq) for s in g] for g in groups] == [
        [("log-a", 0, 50)], [("log-a", 50, 100)], [("log-a", 100, 120), ("log-b", 5, 12)],
        [("log-x", 0, 50)], [("log-x", 50, 90)]]
    assert sum(s.records for g in groups for s in g) == 120 + 7 + 90
    assert cut_spans([], 10) == []


def test_name_filters_narrow_entities_exactly_where_they_can() -> None:
    narrowing = Narrowing()
    for f in (GreaterThanOrEqual(("partition",), "g02"), LessThan(("partition",), "g05"),
              GreaterThan(("row",), b"x")):
        narrowing.push(f, "partition", None)
    assert (narrowing.start, narrowing.end) == (("g02", b""), ("g05", b""))
    assert [type(f).__name__ for f in narrowing.unhandled] == ["GreaterThan"]  # not a key

    equal = Narrowing()
    equal.push(EqualTo(("partition",), "g04"), "partition", None)
    assert (equal.start, equal.end, equal.unhandled) == (("g04", b""), ("g04-0", b""), [])
    inclusive = Narrowing()
    inclusive.push(LessThanOrEqual(("partition",), "g04"), "partition", None)
    inclusive.push(GreaterThan(("partition",), "g01"), "partition", None)
    assert (inclusive.start, inclusive.end) == (("g01-0", b""), ("g04-0", b""))


def test_filters_that_are_not_exact_narrow_safely_and_stay_with_spark() -> None:
    several = Narrowing()
    several.push(In(("partition",), ("g05", "g02")), "partition", None)
    assert (several.start, several.end) == (("g02", b""), ("g05-0", b""))
    assert len(several.unhandled) == 1  # g03, g04 are read too: Spark drops them
    prefix = Narrowing()
    prefix.push(StringStartsWith(("partition",), "g0"), "partition", None)
    assert (prefix.start, prefix.end, len(prefix.unhandled)) == (None, None, 1)
    odd = Narrowing()
    odd.push(EqualTo(("partition",), "NOT A NAME"), "partition", None)
    assert odd.unhandled == [] and entity_pieces(RANGES, odd.start, odd.end) == []


def test_log_and_seq_filters() -> None:
    narrowing = Narrowing(logs_mode=True)
    for f in (In(("log",), ("log-a", "log-x")), GreaterThanOrEqual(("seq",), 10),
              LessThan(("seq",), 20), EqualTo(("data",), b"z")):
        narrowing.push(f, "log", "seq")
    assert [type(f).__name__ for f in narrowing.unhandled] == ["EqualTo"]
    assert narrowing.logs_kept(["log-a", "log-b", "log-x"]) == ["log-a", "log-x"]
    assert narrowing.span("log-a", 0, 120) == LogSpan("log-a", 10, 20)
    assert narrowing.span("log-x", 15, 18) == LogSpan("log-x", 15, 18)
    assert narrowing.span("log-x", 30, 40).records == 0
    ranged = Narrowing(logs_mode=True)
    ranged.push(LessThan(("log",), "log-b"), "log", "seq")
    ranged.push(LessThanOrEqual(("seq",), 4), "log", "seq")
    assert ranged.logs_kept(["log-a", "log-b", "log-c"]) == ["log-a"]
    assert ranged.span("log-a", 0, 9) == LogSpan("log-a", 0, 5)


def test_capped_shares_the_limit_fairly_among_logs() -> None:
    start = {"a": 10, "b": 0}
    latest = {"a": 50, "b": 30, "c": 5}
    assert capped(start, latest, 1000) == latest
    # 40, 30 and 5 waiting: c takes its 5, a and b share the other 40.
    assert capped(start, latest, 45) == {"a": 30, "b": 20, "c": 5}
    assert capped(start, latest, 0) == {"a": 10, "b": 0, "c": 0}
    assert capped({"a": 0}, {"a": 1_000_000, "b": 1}, 2) == {"a": 1, "b": 1}


def test_a_big_range_is_cut_at_its_middle_name() -> None:
    ranges = [EntityPiece(None, ("g03", b""), 1, size_bytes=900, middle="g01"),
              EntityPiece(("g03", b""), None, 2, size_bytes=900, middle="")]
    assert entity_pieces(ranges, None, None, bytes_per_partition=1000) == [
        EntityPiece(None, ("g03", b""), 1), EntityPiece(("g03", b""), None, 2)]
    assert entity_pieces(ranges, None, None, bytes_per_partition=100) == [
        EntityPiece(None, ("g01", b""), 1), EntityPiece(("g01", b""), ("g03", b""), 1),
        EntityPiece(("g03", b""), None, 2)]
    # A read that starts past the middle is not cut there.
    assert entity_pieces(ranges, ("g02", b""), ("g04", b""), bytes_per_partition=100) == [
        EntityPiece(("g02", b""), ("g03", b""), 1), EntityPiece(("g03", b""), ("g04", b""), 2)]
