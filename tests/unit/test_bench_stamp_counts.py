"""What `stamp bench fe-append` counts of a stamp's servers per request (tools/bench/
stamp_counts.py), from their metrics pages as a scrape parses them."""

from __future__ import annotations

from tools.bench.stamp_counts import StampCounts
from tools.scrape import parse

PS_PAGE = """\
# TYPE stamp_ps_call_messages counter
stamp_ps_call_messages_total{direction="in"} 40.0
stamp_ps_call_messages_total{direction="out"} 55.0
"""
EN_PAGE = """\
# TYPE stamp_journal_group_commit_records histogram
stamp_journal_group_commit_records_bucket{le="1.0"} 10.0
stamp_journal_group_commit_records_bucket{le="+Inf"} 25.0
stamp_journal_group_commit_records_count 25.0
stamp_journal_group_commit_records_sum 100.0
"""


def test_a_phase_counts_what_the_servers_did_during_it_per_request() -> None:
    before = StampCounts()
    after = StampCounts()
    for page in (PS_PAGE, EN_PAGE, EN_PAGE):  # a partition server, two extent nodes
        after._add(parse(page))
    phase = StampCounts()
    phase.add(after, before)
    phase.add(after, before)  # two turns of the same path add up
    assert phase == StampCounts(80.0, 110.0, 100.0, 400.0)
    assert phase.per_request(200) == {
        "ps_messages_in_per_request": 0.4, "ps_messages_out_per_request": 0.55,
        "en_group_commits_per_request": 0.5, "en_records_per_group_commit": 4.0}
    # No request, no group commit: nothing divided by zero.
    assert StampCounts().per_request(0)["en_records_per_group_commit"] == 0.0
