"""How a follower tells a client where the leader is.

`common.rpc` carries only an error's class and message across gRPC, so the leader's gRPC
address rides in NotLeader's message, marked by LEADER_MARK; `leader_hint` reads it back.
(If common.rpc ever carries `NotLeader.leader` itself, only this module changes.)
"""

from __future__ import annotations

from common.errors import NotLeader

LEADER_MARK = "leader="


def not_leader(leader_address: str | None) -> NotLeader:
    if leader_address:
        return NotLeader(f"not the leader; {LEADER_MARK}{leader_address}", leader=leader_address)
    return NotLeader("not the leader; leader unknown (election in progress?)")


def leader_hint(error: BaseException) -> str | None:
    """The leader's address a NotLeader error names, if any."""
    if not isinstance(error, NotLeader):
        return None
    if error.leader:
        return error.leader
    _, mark, rest = str(error).partition(LEADER_MARK)
    return rest.split()[0] if mark and rest.split() else None
