"""Raft §5.3 on pysyncobj (common/raft_append.py, common/raft.py): a follower deletes only
entries that conflict with the leader's. The planner on tables, then a real 3-replica group
of DurableReplicas on a network the test controls (tests/raft_network.py): several batches
in flight, a resend cut short, the leader killed."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import FAIL_REASON

from common.raft_append import AppendPlan, TransmissionAssembler, plan_append
from tests.raft_network import InProcessNetwork, Message, ValuesReplica, run_until, tuning

# The follower's log in these tables: index -> term.
LOG = {5: 1, 6: 1, 7: 1, 8: 2, 9: 2, 10: 2}


def plan(prev: int, prev_term: int, entries: list[tuple[int, int]], commit: int = 5,
         log: dict[int, int] = LOG) -> AppendPlan:
    return plan_append(prev, prev_term, [(b"x", i, t) for i, t in entries], log.get,
                       max(log), commit)


def test_a_message_with_an_unknown_previous_entry_is_left_for_pysyncobj_to_refuse() -> None:
    assert plan(11, 2, [(12, 2)]) == AppendPlan(11, 2, ((b"x", 12, 2),))
    assert plan(7, 2, [(8, 2)]) == AppendPlan(7, 2, ((b"x", 8, 2),))


def test_matching_entries_are_skipped_and_new_ones_appended_after_them() -> None:
    assert plan(6, 1, [(7, 1), (8, 2), (9, 2), (10, 2), (11, 2)]) == \
        AppendPlan(10, 2, ((b"x", 11, 2),))


def test_deletion_starts_at_the_first_conflicting_entry() -> None:
    assert plan(6, 1, [(7, 1), (8, 3)]) == AppendPlan(7, 1, ((b"x", 8, 3),))
    assert plan(7, 1, [(8, 3)]) == AppendPlan(7, 1, ((b"x", 8, 3),))


def test_a_message_ending_before_the_log_hides_the_rest_instead_of_deleting_it() -> None:
    # A stale resend of 8..9 while the log holds 10: nothing is deleted; pysyncobj sees the
    # log end at 9, so it answers "next 10" and commits no further than 9.
    assert plan(7, 1, [(8, 2), (9, 2)]) == AppendPlan(9, 2, (), hide_after=9)
    # A bare heartbeat with an old previous entry.
    assert plan(6, 1, []) == AppendPlan(6, 1, (), hide_after=6)


def test_the_anchor_is_the_commit_index_when_that_is_further() -> None:
    # Entries up to the commit index are in every later leader's log: claiming them keeps
    # pysyncobj from setting the commit index back.
    assert plan(6, 1, [(7, 1)], commit=9) == AppendPlan(9, 2, (), hide_after=9)


def test_a_resend_that_matches_up_to_the_log_end_deletes_and_adds_nothing() -> None:
    # Left as it came, pysyncobj would delete 9 and 10 (applied, maybe) and add them again.
    assert plan(8, 2, [(9, 2), (10, 2)]) == AppendPlan(10, 2, ())
    assert plan(10, 2, []) == AppendPlan(10, 2, ())


def test_new_entries_past_a_matching_end_are_appended_without_deleting() -> None:
    assert plan(8, 2, [(9, 2), (10, 2), (11, 2)]) == AppendPlan(10, 2, ((b"x", 11, 2),))


def test_a_big_entry_is_planned_once_its_last_part_is_in() -> None:
    data = pickle.dumps((b"y" * 100, 11, 2))
    parts = TransmissionAssembler()
    assert parts.feed({"transmission": "start", "data": data[:40]}) is None
    assert parts.feed({"transmission": "process", "data": data[40:80]}) is None
    assert parts.feed({"transmission": "finish", "data": data[80:]}) == [(b"y" * 100, 11, 2)]


def pysyncobj_parts(entry: tuple[bytes, int, int], batch_bytes: int) -> list[dict[str, Any]]:
    """The transmission messages pysyncobj 0.3.17's leader sends for one big entry
    (SyncObj.__sendAppendEntries, its labelling copied as it is)."""
    data = pickle.dumps(entry)
    parts = []
    for pos in range(0, len(data), batch_bytes):
        if pos == 0:
            kind = "start"
        elif pos + batch_bytes >= len(entry[0]):
            kind = "finish"
        else:
            kind = "process"
        parts.append({"transmission": kind, "data": data[pos:pos + batch_bytes]})
    return parts


@pytest.mark.parametrize("command_bytes", [100, 119, 120, 121, 150, 160, 200])
def test_a_big_entry_is_whole_whatever_its_length(command_bytes: int) -> None:
    # Parts of 40 bytes, about the pickle's own overhead, so that most of these lengths
    # make pysyncobj mark two parts "finish": the one where the command ends and the
    # pickle's tail after it (with 64 KiB parts: a command within ~40 bytes of a multiple).
    entry = (b"z" * command_bytes, 11, 2)
    parts = TransmissionAssembler()
    assembled = [parts.feed(m) for m in pysyncobj_parts(entry, 40)]
    assert assembled[-1] == [entry]
    assert assembled[:-1] == [None] * (len(assembled) - 1)


# ---- a real group on a controlled network ----------------------------------------------------

A, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
# Two values fill pysyncobj's append_entries byte budget (64 KiB): a resend is cut short.
VALUE_BYTES = 40_000


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[InProcessNetwork, dict[str, ValuesReplica]]]:
    network = InProcessNetwork()
    replicas = {address: ValuesReplica(address, [A, B, C], tmp_path / address.replace(":", "_"),
                                       tuning(first_leader=address == A), network)
                for address in (A, B, C)}
    yield network, replicas
    for replica in replicas.values():
        replica.destroy()


def between(source: str, target: str, kind: str | None = None) -> Callable[[Message], bool]:
    return lambda m: (m.source, m.target) == (source, target) and (kind is None
                                                                   or m.kind == kind)


def test_a_resend_cut_short_then_a_dead_leader_loses_no_acknowledged_entry(
        group: tuple[InProcessNetwork, dict[str, ValuesReplica]]) -> None:
    network, replicas = group
    a, b, c = replicas[A], replicas[B], replicas[C]
    acked: list[bytes] = []

    def acknowledge(value: bytes) -> Callable[[object, int], None]:
        def settle(_result: object, error: int) -> None:
            if error == FAIL_REASON.SUCCESS:
                acked.append(value)
        return settle

    first = b"warm"
    run_until(list(replicas.values()), network, a.is_leader, "A to lead")
    a.add_value(first, callback=acknowledge(first))
    run_until(list(replicas.values()), network,
              lambda: acked == [first] and c.values == [first], "one committed value")

    network.settle()  # no stale reply left to confuse the next steps

    # From here C hears nothing (a slow member): A and B are the majority.
    def to_c(m: Message) -> bool:
        return C in (m.source, m.target)
    network.drop(to_c)
    values = [bytes([65 + i]) * VALUE_BYTES for i in range(6)]
    for value in values:
        a.add_value(value, callback=acknowledge(value))

    def batches_to_b() -> list[list[object]]:
        return [m.body["entries"] for m in network.queue
                if between(A, B, "append_entries")(m) and m.body.get("entries")]
    # An append_entries per value (or two) as A logs them: batches in flight to B.
    run_until([a], network, lambda: sum(map(len, batches_to_b())) >= len(values),
              "A to send every value", keep=lambda m: False)
    network.drop(to_c)
    assert len(batches_to_b()) >= 3, "several batches in flight"
    first_reply: Message | None = None
    for message in [m for m in network.queue if between(A, B)(m)]:
        network.deliver(lambda m, message=message: m is message)
        if first_reply is None and message.body.get("entries"):
            first_reply = network.queue[-1]  # B's answer to the first batch
    assert first_reply is not None and between(B, A, "next_node_idx")(first_reply)

    # B's reply to the first batch reaches A alone: A sets B's next index back and resends
    # from there, in batches cut at the byte budget.
    network.deliver(lambda m: m is first_reply)
    run_until([a], network, lambda: any(
        between(A, B, "append_entries")(m) and m.body.get("entries") for m in network.queue),
        "A to resend from B's reported index", keep=lambda m: False)
    network.drop(to_c)
    resend = next(m for m in network.queue
                  if between(A, B, "append_entries")(m) and m.body.get("entries"))
    assert len(resend.body["entries"]) < len(values) - 1, "the resend is cut short"

    # The other replies arrive: A counts B as holding every value, commits and acknowledges.
    run_until([a], network, lambda: acked == [first, *values], "A to acknowledge the values",
              keep=lambda m: between(B, A)(m))

    # Only the first resend reaches B, then A dies.
    network.deliver(lambda m: m is resend)
    a.destroy()
    network.disconnect(A)
    network.inject(A, B, {"type": "timeout_now", "term": b.raftCurrentTerm})

    def b_leads_and_c_caught_up() -> bool:
        last = b._durable_journal[-1][1]  # B's own no-op, once it leads
        return (b.is_leader() and b.raftCommitIndex == b.raftLastApplied == last
                and c.raftLastApplied == last)
    run_until([b, c], network, b_leads_and_c_caught_up, "B to lead and C to catch up")
    assert b.values == acked, "an acknowledged value vanished"
    assert c.values == acked
