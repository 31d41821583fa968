"""A partition's CURP witnesses (partition_layer/witness_set.py): which extent nodes an owner
picks, and the set as a metadata record keeps it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from common.proto import stream_manager_pb2 as sm_pb
from partition_layer.keys import KeyRange
from partition_layer.partition_meta import PartitionMeta, decode_meta, encode_meta
from partition_layer.witness_set import (
    GENERATION_BITS,
    WitnessSet,
    generation,
    owner_epoch,
    pick,
    set_epoch,
)


def nodes(per_domain: int = 3, domains: int = 3, **states: str) -> list[sm_pb.NodeInfo]:
    """en-1.. in fd-1.. round robin; `states`: a node's state by name ("dead", "suspect")."""
    found = []
    for i in range(1, per_domain * domains + 1):
        name = f"en-{i}"
        state = states.get(name.replace("-", "_"), "alive")
        found.append(sm_pb.NodeInfo(name=name, address=f"127.0.0.1:{9000 + i}",
                                    fault_domain=f"fd-{(i - 1) % domains + 1}",
                                    state="dead" if state == "dead" else "alive",
                                    suspect=state == "suspect"))
    return found


def domain_of(address: str, of: list[sm_pb.NodeInfo]) -> str:
    return next(n.fault_domain for n in of if n.address == address)


def test_three_live_nodes_in_three_fault_domains():
    every = nodes()
    for partition_id in range(1, 20):
        chosen = pick(every, partition_id)
        assert chosen is not None and len(chosen) == 3
        assert len({domain_of(a, every) for a in chosen}) == 3


def test_partitions_spread_over_the_nodes():
    every = nodes()
    load = Counter(a for p in range(1, 91) for a in pick(every, p) or ())
    assert len(load) == 9  # every node witnesses some partitions
    assert max(load.values()) <= 2 * min(load.values())


def test_dead_and_suspect_nodes_are_left_out_and_two_domains_are_not_enough():
    every = nodes(en_1="dead", en_4="suspect", en_7="dead")  # fd-1 has none left
    assert pick(every, 5) is None
    some = nodes(en_1="dead", en_4="suspect")
    chosen = pick(some, 5)
    assert chosen is not None and "127.0.0.1:9007" in chosen  # fd-1's one live node
    assert not {"127.0.0.1:9001", "127.0.0.1:9004"} & set(chosen)


def test_witnesses_are_picked_away_from_the_commit_logs_replicas_where_a_domain_can():
    """A node that is both a witness and a replica of the partition's commit log handles
    each fast write twice at once: each domain gives another node if it has one."""
    every = nodes()
    replicas = {"127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"}  # en-1..3: fd-1..3
    for partition_id in range(1, 20):
        chosen = pick(every, partition_id, avoid=replicas)
        assert chosen is not None and replicas.isdisjoint(chosen)
        assert sorted(domain_of(a, every) for a in chosen) == ["fd-1", "fd-2", "fd-3"]
    one_per_domain = nodes(per_domain=1)
    assert set(pick(one_per_domain, 4, avoid=replicas) or ()) == replicas  # no other node


def test_a_metadata_record_keeps_the_set_and_older_records_have_none():
    bare = PartitionMeta(partition_id=7, key_range=KeyRange(b"", None))
    assert decode_meta(encode_meta(bare)).witnesses is None
    assert "witnesses" not in bare.to_dict()  # records before CURP read the same
    named = PartitionMeta(partition_id=7, key_range=KeyRange(b"", None),
                          witnesses=WitnessSet(4, ("a:1", "b:2", "c:3")))
    assert decode_meta(encode_meta(named)) == named


def dropping_calls(sent: list[tuple[str, list[bytes]]], gates: dict[str, Any]) -> Any:
    """An OwnerCalls of witnesses a:1, b:2 and c:3 whose Drop notes (address, tokens) in
    `sent` and answers once the address's gate (an asyncio.Event, if it has one) is set."""
    from common.proto import witness_pb2 as wpb
    from partition_layer.witness_set import OwnerCalls

    class Stub:
        def __init__(self, address: str) -> None:
            self.address = address

        async def Drop(self, request: wpb.DropRequest, timeout: float) -> wpb.DropReply:
            sent.append((self.address, list(request.tokens)))
            if self.address in gates:
                await gates[self.address].wait()
            return wpb.DropReply(dropped=len(request.tokens))

    calls = OwnerCalls(None, WitnessSet(3, ("a:1", "b:2", "c:3")), 7, 3)  # type: ignore[arg-type]
    calls._stub = Stub  # type: ignore[method-assign]
    return calls


def test_drops_go_one_call_per_witness_at_a_time_the_rest_batched() -> None:
    """An owner drops the records of every block it syncs: while a Drop is in flight, what
    the next blocks made durable waits and goes in one call, not one call per block."""
    import asyncio


    async def scenario() -> None:
        gate = asyncio.Event()
        sent: list[tuple[str, list[bytes]]] = []

        calls = dropping_calls(sent, {"a:1": gate, "b:2": gate, "c:3": gate})
        calls.drop([b"t1"])
        await asyncio.sleep(0)
        calls.drop([b"t2"])
        calls.drop([b"t3"])
        for _ in range(5):
            await asyncio.sleep(0)
        assert sorted(sent) == [("a:1", [b"t1"]), ("b:2", [b"t1"]), ("c:3", [b"t1"])]
        gate.set()
        for _ in range(10):
            await asyncio.sleep(0)
        assert sorted(sent)[1::2] == [("a:1", [b"t2", b"t3"]), ("b:2", [b"t2", b"t3"]),
                                      ("c:3", [b"t2", b"t3"])]
        assert len(sent) == 6
        await calls.close()
    asyncio.run(scenario())


def test_a_slow_witness_holds_up_no_other_witness_drops() -> None:
    """One witness frozen with a Drop in flight: the others go on dropping every block's
    records as they come (found by the witness-fault probes: a frozen witness held the
    two live ones' drops up for its whole call timeout, per round)."""
    import asyncio


    async def scenario() -> None:
        frozen = asyncio.Event()
        sent: list[tuple[str, list[bytes]]] = []

        calls = dropping_calls(sent, {"c:3": frozen})
        for token in (b"t1", b"t2", b"t3"):
            calls.drop([token])
            for _ in range(5):
                await asyncio.sleep(0)
        assert [t for a, t in sent if a == "a:1"] == [[b"t1"], [b"t2"], [b"t3"]]
        assert [t for a, t in sent if a == "b:2"] == [[b"t1"], [b"t2"], [b"t3"]]
        assert [t for a, t in sent if a == "c:3"] == [[b"t1"]]  # the rest wait for it
        frozen.set()
        for _ in range(10):
            await asyncio.sleep(0)
        assert [t for a, t in sent if a == "c:3"] == [[b"t1"], [b"t2", b"t3"]]
        await calls.close()
    asyncio.run(scenario())


def test_set_epochs_order_every_set_of_a_newer_owner_above_an_older_owners() -> None:
    """Witnesses fence by set epoch: an owner's later sets rise above its earlier ones, and
    a newer owner's first set above all of them."""
    assert set_epoch(5) < set_epoch(5, 1) < set_epoch(5, (1 << GENERATION_BITS) - 1) \
        < set_epoch(6)
    for owner, gen in ((1, 0), (5, 3), (1 << 40, (1 << GENERATION_BITS) - 1)):
        epoch = set_epoch(owner, gen)
        assert (owner_epoch(epoch), generation(epoch)) == (owner, gen)
    assert set_epoch(1) > 0  # never the front ends' "no witnesses known"
