"""The durable Raft journal (common/raft_journal.py) and the transport that waits for it
(common/raft.py): replay, torn tails, crash consistency with real SIGKILLs, group commit."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pysyncobj import replicated
from pysyncobj.transport import TCPTransport

from common import raft_journal
from common.errors import InvalidArgument
from common.process import free_port
from common.raft import DurableReplica, DurableTransport
from common.raft_journal import MAGIC, DurableJournal, JournalCorrupt
from tests.support.waiting import wait_until


def command(idx: int) -> bytes:
    return f"cmd-{idx}-".encode() * (1 + idx % 5)


def crash(journal: DurableJournal) -> None:
    """Drop the journal as kill -9 would: whatever was not synced is gone."""
    os.close(journal._fd)
    journal._fd = -1


def fill(journal: DurableJournal, first: int, last: int, term: int = 1) -> None:
    for idx in range(first, last + 1):
        journal.add(command(idx), idx, term)


def indexes(journal: DurableJournal) -> list[int]:
    return [entry[1] for entry in journal[:]]


def test_replay_restores_entries_term_vote_and_commit(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = DurableJournal(path)
    fill(journal, 1, 20)
    journal.setCurrentTerm(3, "127.0.0.1:7000")
    journal.setRaftCommitIndex(15)
    journal.sync()
    journal.close()
    again = DurableJournal(path)
    assert again[:] == [(command(i), i, 1) for i in range(1, 21)]
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (3, "127.0.0.1:7000")
    assert again.getRaftCommitIndex() == 15


def test_unsynced_changes_are_lost_synced_ones_are_not(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path / "j")
    fill(journal, 1, 5)
    journal.sync()
    fill(journal, 6, 9)
    assert journal.dirty
    crash(journal)
    assert indexes(DurableJournal(tmp_path / "j")) == [1, 2, 3, 4, 5]


def test_term_is_durable_when_set_returns(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path / "j")
    journal.setCurrentTerm(7, None)
    crash(journal)
    again = DurableJournal(tmp_path / "j")
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, None)


def test_committing_an_unsynced_entry_syncs_it_first(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path / "j")
    fill(journal, 1, 3)
    journal.setRaftCommitIndex(2)  # a leader about to apply entry 2
    assert not journal.dirty
    crash(journal)
    assert indexes(DurableJournal(tmp_path / "j")) == [1, 2, 3]


def test_many_changes_share_one_sync(tmp_path: Path) -> None:
    journal = DurableJournal(tmp_path / "j")
    fill(journal, 1, 500)
    journal.sync()
    journal.sync()
    assert journal.syncs == 1


def test_torn_tail_at_every_byte_is_cut_at_the_last_whole_record(tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = DurableJournal(path)
    ends = []  # (file size, entries durable at that size)
    for batch in range(5):
        fill(journal, batch * 3 + 1, batch * 3 + 3)
        journal.sync()
        ends.append((path.stat().st_size, batch * 3 + 3))
    journal.close()
    whole = path.read_bytes()
    for cut in range(len(MAGIC), len(whole) + 1):
        torn = tmp_path / "torn"
        torn.write_bytes(whole[:cut])
        replayed = DurableJournal(torn)
        got = indexes(replayed)
        assert got == list(range(1, len(got) + 1)), f"cut at {cut}: not a prefix"
        assert len(got) >= max([n for size, n in ends if size <= cut], default=0)
        assert all(e == (command(e[1]), e[1], 1) for e in replayed[:])
        replayed.add(command(len(got) + 1), len(got) + 1, 2)  # appends go after the cut
        replayed.close()
        assert indexes(DurableJournal(torn))[-1] == len(got) + 1


@pytest.mark.parametrize("damage", ["garbage", "flipped bit", "huge length"])
def test_damaged_last_record_is_cut(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "j"
    journal = DurableJournal(path)
    fill(journal, 1, 10)
    journal.close()
    data = bytearray(path.read_bytes())
    if damage == "garbage":
        data += os.urandom(100)
    elif damage == "flipped bit":
        data[-3] ^= 0x10
    else:
        data += raft_journal.HEADER.pack(2**31, 0, raft_journal.ENTRY)
    path.write_bytes(bytes(data))
    expected = list(range(1, 11)) if damage != "flipped bit" else list(range(1, 10))
    assert indexes(DurableJournal(path)) == expected


def test_not_a_journal_is_refused(tmp_path: Path) -> None:
    (tmp_path / "j").write_bytes(b"something else entirely")
    with pytest.raises(JournalCorrupt):
        DurableJournal(tmp_path / "j")


def test_deleted_entries_stay_on_disk_until_a_different_entry_replaces_them(
        tmp_path: Path) -> None:
    path = tmp_path / "j"
    journal = DurableJournal(path)
    fill(journal, 1, 10)
    journal.sync()
    size = path.stat().st_size
    journal.deleteEntriesFrom(4)  # pysyncobj: "truncating already-applied log entries"
    assert indexes(journal) == [1, 2, 3, 4]
    fill(journal, 5, 8)  # ... then the same entries again
    journal.sync()
    assert path.stat().st_size == size and indexes(journal) == list(range(1, 9))
    journal.deleteEntriesFrom(2)
    journal.rewrite()  # nor with a rewrite of the file
    crash(journal)  # acknowledged entries must not vanish with an uncommitted deletion
    journal = DurableJournal(path)
    assert indexes(journal) == list(range(1, 11))
    journal.deleteEntriesFrom(5)
    journal.add(b"other", 6, 2)  # a real conflict: now entries 6.. go
    journal.sync()
    crash(journal)
    assert DurableJournal(path)[:] == [(command(i), i, 1) for i in range(1, 6)] + [(b"other", 6, 2)]


def test_compaction_and_rewrite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(raft_journal, "REWRITE_BYTES_MIN", 2000)
    path = tmp_path / "j"
    journal = DurableJournal(path)
    fill(journal, 1, 200)
    journal.setCurrentTerm(4, "me")
    journal.deleteEntriesTo(198)  # a snapshot covers entries 1..198
    assert indexes(journal) == [199, 200]
    assert path.stat().st_size < 400, "garbage dominated: the file was rewritten"
    fill(journal, 201, 202, term=4)
    journal.sync()
    crash(journal)
    (tmp_path / "j.rewrite").write_bytes(b"half a rewrite")  # a crash mid-rewrite
    again = DurableJournal(path)
    assert indexes(again) == [199, 200, 201, 202] and again.getCurrentTerm() == 4
    assert not (tmp_path / "j.rewrite").exists()
    again.clear()
    again.add(b"x", 300, 5)
    again.close()
    assert indexes(DurableJournal(path)) == [300]


WRITER = textwrap.dedent("""
    import sys
    from common import faults
    from common.raft_journal import DurableJournal
    from tests.unit.test_raft_journal import command  # this module, in the writer process
    faults.arm_from_env()
    journal = DurableJournal(sys.argv[1])
    idx = len(journal) and journal[-1][1]
    batch = 1
    while True:
        for _ in range(batch):
            idx += 1
            journal.add(command(idx), idx, 1)
        journal.sync()
        print(idx, flush=True)  # acknowledged: durable
        batch = batch % 7 + 1
""")


@pytest.mark.parametrize("how", ["sigkill", "torn write"])
def test_acknowledged_entries_survive_a_crash_at_any_moment(
        tmp_path: Path, how: str, rng: Any) -> None:
    path = tmp_path / "j"
    acked = 0
    for round_ in range(4):
        env = dict(os.environ)
        if how == "torn write":
            env["STAMP_FAULTS"] = f"raft_journal.sync=torn,after={rng.randrange(5, 60)}"
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], env=env,
                                 stdout=subprocess.PIPE, cwd=Path(__file__).parents[2])
        try:
            lines = 0
            kill_after = rng.randrange(1, 80)
            assert child.stdout is not None
            for line in child.stdout:
                acked, lines = int(line), lines + 1
                assert lines < 1000, "the armed fault point never fired"
                if how == "sigkill" and lines >= kill_after:
                    os.kill(child.pid, signal.SIGKILL)
                    break
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
            child.wait()
        assert child.returncode == -signal.SIGKILL, f"round {round_}: writer died otherwise"
        journal = DurableJournal(path)
        got = indexes(journal)
        assert got == list(range(1, len(got) + 1)) and len(got) >= acked, \
            f"round {round_}: acknowledged up to {acked}, replayed {len(got)}"
        assert all(entry[0] == command(entry[1]) for entry in journal[:])
        journal.close()


# --- the transport that waits for the journal --------------------------------------------------


def test_transport_holds_messages_until_the_journal_is_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, dict]] = []
    journal = DurableJournal(tmp_path / "j")
    monkeypatch.setattr(TCPTransport, "send", lambda self, node, message: sent.append(
        (node, dict(message, durable=not journal.dirty))) or True)
    transport = DurableTransport.__new__(DurableTransport)
    transport._journal, transport._held = journal, []

    transport.send("n1", {"type": "next_node_idx"})
    assert sent == [("n1", {"type": "next_node_idx", "durable": True})]
    fill(journal, 1, 2)
    transport.send("n1", {"type": "append_entries"})  # a leader's entries need not wait
    transport.send("n1", {"type": "next_node_idx"})
    transport.send("n1", {"type": "append_entries"})  # behind a held message: waits
    assert [m["type"] for _, m in sent] == ["next_node_idx", "append_entries"]
    transport._flush()
    assert [m["type"] for _, m in sent[2:]] == ["next_node_idx", "append_entries"]
    assert all(m["durable"] for _, m in sent[2:]) and journal.syncs == 1


# --- a real (in-process) durable group ---------------------------------------------------------


SECRET = b"a stamp secret of the unit tests, 32 characters or more"


class Counter(DurableReplica):
    def __init__(self, address: str, peers: list[str], raft_dir: Path,
                 secret: bytes | None = SECRET) -> None:
        self.value = 0
        super().__init__(address, peers, raft_dir, secret=secret)

    @replicated
    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def snapshot_state(self) -> bytes:
        return pickle.dumps(self.value)

    def restore_state(self, blob: bytes) -> None:
        self.value = pickle.loads(blob)


@pytest.mark.slow
def test_durable_group_commits_compacts_and_restarts(tmp_path: Path) -> None:
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    group = [Counter(a, addresses, tmp_path / str(i)) for i, a in enumerate(addresses)]
    try:
        wait_until(lambda: any(r.is_leader() for r in group), 10.0, "a leader")
        leader = next(r for r in group if r.is_leader())
        for _ in range(50):
            leader.add(1, sync=True, timeout=5)
        wait_until(lambda: [r.value for r in group] == [50] * 3, 10.0, "50 on every replica")
        for replica in group:
            replica.forceLogCompaction()
        wait_until(lambda: all(r._getRaftLogSize() < 10 for r in group), 10.0,
                   "every log compacted")  # compacted
        assert all((tmp_path / str(i) / "raft.snapshot").exists() for i in range(3))
        for _ in range(10):
            leader.add(2, sync=True, timeout=5)
        wait_until(lambda: [r.value for r in group] == [70] * 3, 10.0, "70 on every replica")
    finally:
        for replica in group:
            replica.close()
    shutil.rmtree(tmp_path / "2")  # one replica lost its disk: it must catch up from peers
    group = [Counter(a, addresses, tmp_path / str(i)) for i, a in enumerate(addresses)]
    try:
        wait_until(lambda: [r.value for r in group] == [70] * 3, 10.0, "70 on every replica")
    finally:
        for replica in group:
            replica.close()


def test_a_replica_on_tcp_refuses_to_run_without_the_stamp_secret(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(InvalidArgument, match="needs the stamp secret"):
        Counter(address, [address], tmp_path / "r", secret=None)


@pytest.mark.slow
def test_a_replica_with_another_secret_takes_no_part_in_the_group(tmp_path: Path) -> None:
    """Peers authenticate each other: two replicas with the secret form the group and
    commit; the third, with another secret, hears none of it (its messages are refused,
    and it refuses theirs)."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    secrets = [SECRET, SECRET, b"another secret of 32 characters or more"]
    group = [Counter(a, addresses, tmp_path / str(i), secret=s)
             for i, (a, s) in enumerate(zip(addresses, secrets, strict=True))]
    try:
        wait_until(lambda: group[0].is_leader() or group[1].is_leader(), 10.0,
                   "a leader of the two")
        leader = group[0] if group[0].is_leader() else group[1]
        for _ in range(5):
            leader.add(1, sync=True, timeout=5)
        wait_until(lambda: [r.value for r in group[:2]] == [5, 5], 10.0, "5 on the two")
        assert group[2].value == 0 and not group[2].is_leader()
        assert group[2].leader_address() is None
    finally:
        for replica in group:
            replica.close()
