"""Majority contact and PreVote (common/raft_lease.py, common/raft.py): the decisions on
tables, then a 3-replica group of DurableReplicas on a network the test controls
(tests/raft_network.py), where a follower whose election timer fires cannot depose a
healthy leader, and the leader's majority contact is the send time its followers echo."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.raft_lease import (
    PRE_VOTE_REPLY,
    PreVoteRound,
    grant_pre_vote,
    majority_contact,
    steps_aside,
)
from tests.raft_network import InProcessNetwork, Message, ValuesReplica, run_until, tuning


def test_majority_contact_is_the_send_time_a_majority_has_echoed_in_this_term() -> None:
    assert majority_contact({"b": (2, 5.0), "c": (2, 7.0)}, 2, 3, now=9.0) == 7.0
    assert majority_contact({"b": (2, 5.0), "c": (1, 7.0)}, 2, 3, now=9.0) == 5.0
    assert majority_contact({"b": (1, 5.0)}, 2, 3, now=9.0) is None
    assert majority_contact({}, 2, 1, now=9.0) == 9.0  # alone: the leader is the majority
    five = {"b": (2, 5.0), "c": (2, 7.0), "d": (2, 6.0), "e": (2, 1.0)}
    assert majority_contact(five, 2, 5, now=9.0) == 6.0


@pytest.mark.parametrize(("asked", "asker_last", "leader", "since_s", "granted"), [
    (4, (3, 10), False, 1.0, True),
    (3, (3, 10), False, 1.0, False),   # not a newer term than ours
    (4, (3, 10), True, 1.0, False),    # we lead: we are alive
    (4, (3, 10), False, 0.1, False),   # a leader was heard a moment ago
    (4, (3, 9), False, 1.0, False),    # its log is behind ours
    (4, (2, 20), False, 1.0, False),   # an older last term loses to a longer log
    (4, (4, 1), False, 1.0, True),     # a newer last term wins
])
def test_grant_pre_vote(asked: int, asker_last: tuple[int, int], leader: bool, since_s: float,
                        granted: bool) -> None:
    assert grant_pre_vote(asked_term=asked, asker_last=asker_last, my_term=3,
                          my_last=(3, 10), is_leader=leader, since_leader_s=since_s,
                          election_timeout_min_s=0.3) is granted


def test_of_two_replicas_canvassing_at_once_the_larger_id_steps_aside() -> None:
    assert steps_aside("127.0.0.1:3", "127.0.0.1:2")
    assert not steps_aside("127.0.0.1:2", "127.0.0.1:3")


def test_a_pre_vote_round_is_won_by_a_majority_of_yeses_for_its_term() -> None:
    canvass = PreVoteRound(5, 3, {"a"})
    assert not canvass.record("b", 4, True)  # an answer to an older canvass
    assert not canvass.record("b", 5, False)
    assert canvass.record("c", 5, True)


A, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[InProcessNetwork, dict[str, ValuesReplica]]]:
    network = InProcessNetwork()
    replicas = {address: ValuesReplica(address, [A, B, C], tmp_path / address.replace(":", "_"),
                                       tuning(first_leader=address == A), network)
                for address in (A, B, C)}
    yield network, replicas
    for replica in replicas.values():
        replica.destroy()


def test_a_follower_whose_timer_fires_cannot_depose_a_healthy_leader(
        group: tuple[InProcessNetwork, dict[str, ValuesReplica]]) -> None:
    network, replicas = group
    a, c = replicas[A], replicas[C]
    everyone = list(replicas.values())
    run_until(everyone, network, lambda: a.is_leader() and c.leader_address() == A,
              "A to lead and C to follow it")
    term = a.raftCurrentTerm
    # C was frozen past its election timeout (it comes back with its timer run out).
    c._SyncObj__raftElectionDeadline = 0
    answered: set[str] = set()

    def keep(message: Message) -> bool:
        if message.kind == PRE_VOTE_REPLY:
            answered.add(message.source)
        return True
    run_until(everyone, network, lambda: len(answered) >= 2 or a.raftCurrentTerm > term,
              "both others to answer C", keep=keep)
    assert a.is_leader() and a.raftCurrentTerm == term, "a healthy leader was deposed"
    assert c.raftCurrentTerm == term and c.leader_address() == A


def test_a_leaders_majority_contact_is_the_send_time_its_followers_echoed(
        group: tuple[InProcessNetwork, dict[str, ValuesReplica]]) -> None:
    network, replicas = group
    a = replicas[A]
    everyone = list(replicas.values())
    run_until(everyone, network, lambda: a.majority_contact_at(a.raftCurrentTerm) is not None,
              "a majority to answer A")
    term = a.raftCurrentTerm
    first = a.majority_contact_at(term)
    assert first is not None and a.majority_contact_at(term + 1) is None
    # Replies held back: A keeps sending, but its contact stays at what was echoed.
    run_until([a], network, lambda: len(network.queue) >= 4, "A to send more",
              keep=lambda m: False)
    assert a.majority_contact_at(term) == first
    newest_sent = max(m.body["stamp_sent"][1] for m in network.queue
                      if m.kind == "append_entries")
    run_until(everyone, network, lambda: (a.majority_contact_at(term) or 0) >= newest_sent,
              "the held messages to be answered")
