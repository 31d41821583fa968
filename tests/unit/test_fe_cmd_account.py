"""tools/cmd_account.py's pure parts: durations, and which processes a connection string
names as endpoints (the front ends, and until they exist the partition managers)."""

from __future__ import annotations

import pytest

from common.errors import InvalidArgument, NotFound
from tools.cmd_account import default_endpoints, parse_duration


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("1h", 3600),
                                          ("7d", 604800)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "0h", "1y", "-1h", "1.5h", "1 h", "١h",
                                  "9999999999d"])
def test_bad_durations_name_the_form(text: str) -> None:
    with pytest.raises(InvalidArgument, match="whole number followed by one of s, m, h, d"):
        parse_duration(text)


def test_front_ends_first_then_partition_managers_then_refused() -> None:
    processes = {"pm-2": {"kind": "partition-manager", "address": "h:2"},
                 "pm-1": {"kind": "partition-manager", "address": "h:1"},
                 "lock-1": {"kind": "lock", "address": "h:9"}}
    endpoints, note = default_endpoints(processes)
    assert endpoints == ["h:1", "h:2"] and "no front ends yet" in note
    processes["fe-1"] = {"kind": "front-end", "address": "h:5"}
    assert default_endpoints(processes) == (["h:5"], "")
    with pytest.raises(NotFound, match="--endpoint"):
        default_endpoints({"lock-1": {"kind": "lock", "address": "h:9"}})
