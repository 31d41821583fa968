"""A bootstrap's copies are done only when the partitions known to have copied cover the
account's keys with no gap (issue 30; tools/geo_bootstrap.covers)."""

from __future__ import annotations

from common.proto import partition_pb2 as pb
from tools.geo_bootstrap import covers


def key_range(low: bytes, high: bytes | None = None) -> pb.KeyRange:
    return pb.KeyRange(low=low, high=high or b"", has_high=high is not None)


def test_ranges_that_cover_the_keys_with_no_gap() -> None:
    assert covers([key_range(b"a", b"m"), key_range(b"m", b"z")], b"c", b"y")
    assert covers([key_range(b"m"), key_range(b"", b"m")], b"c", b"y")  # in any order
    assert covers([key_range(b"", b"d"), key_range(b"d")], b"c", None)


def test_a_gap_or_a_missing_end_is_not_covered() -> None:
    """A partition moving (not serving anywhere) or its server not answering leaves a gap:
    its copy is not known, so the copies are not done."""
    assert not covers([key_range(b"a", b"f"), key_range(b"g", b"z")], b"c", b"y")
    assert not covers([key_range(b"a", b"m")], b"c", b"y")
    assert not covers([key_range(b"d", b"z")], b"c", b"y")
    assert not covers([], b"c", b"y")
