"""Stream policies (§7 "ec"): which streams' sealed extents the ec job erasure-codes, as
what code, and how long after their seal. The SetStreamPolicy handler of the stream
manager's state machine (state.py calls it inside its undo scope, like erasure_handlers.py)
and the pure rule that picks a stream's policy.

A policy names a stream exactly or by an fnmatch pattern (`p-*.rows`); a stream's policy is
the one naming it exactly, else the longest pattern that matches it (the most specific)."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from common.errors import InvalidArgument, NotFound
from stream_layer.stream_manager.commands import SetStreamPolicy
from stream_layer.stream_manager.records import (
    POLICIES_MAX,
    POLICY_PATTERN_BYTES_MAX,
    StreamPolicy,
)

if TYPE_CHECKING:
    from stream_layer.stream_manager.state import StreamManagerState

EC_FRAGMENTS_MAX = 255


def set_stream_policy(st: StreamManagerState, c: SetStreamPolicy) -> StreamPolicy | None:
    """Set (or with ec_k == 0, remove) the policy of `c.pattern`."""
    if not c.pattern or len(c.pattern.encode()) > POLICY_PATTERN_BYTES_MAX:
        raise InvalidArgument(f"a policy's stream name or pattern has 1.."
                              f"{POLICY_PATTERN_BYTES_MAX} bytes")
    if c.ec_k == 0:
        if c.pattern not in st.policies:
            raise NotFound(f"no policy for {c.pattern!r}")
        st._remove(st.policies, c.pattern)
        return None
    if not (c.ec_k >= 1 and c.ec_m >= 1 and c.ec_k + c.ec_m <= EC_FRAGMENTS_MAX) \
            or c.after_s < 0:
        raise InvalidArgument(f"RS({c.ec_k},{c.ec_m}) after {c.after_s} s: k, m >= 1, "
                              f"k + m <= {EC_FRAGMENTS_MAX}, after >= 0")
    if c.pattern not in st.policies and len(st.policies) >= POLICIES_MAX:
        raise InvalidArgument(f"at most {POLICIES_MAX} stream policies")
    policy = StreamPolicy(c.pattern, c.ec_k, c.ec_m, c.after_s)
    st._put(st.policies, c.pattern, policy)
    return policy


def policy_for(stream: str, policies: Mapping[str, StreamPolicy]) -> StreamPolicy | None:
    """The policy of `stream`: named exactly, else the longest matching pattern."""
    exact = policies.get(stream)
    if exact is not None:
        return exact
    matching = [p for pattern, p in policies.items() if fnmatchcase(stream, pattern)]
    return max(matching, key=lambda p: (len(p.pattern), p.pattern), default=None)
