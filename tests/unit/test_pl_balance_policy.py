"""The balancing policy (partition_layer/balance_policy.py): decisions as a pure function of a
load snapshot, on tables of snapshots; the policy class named in the config; the snapshot
built from the map and the heartbeats."""

from __future__ import annotations

import dataclasses

import pytest

from common.config import PartitionManagerConfig
from common.errors import InvalidArgument
from common.proto import partition_pb2 as pb
from partition_layer.balance_policy import (
    DefaultPolicy,
    LoadSnapshot,
    PartitionSnapshot,
    load_policy,
    snapshot_from,
)
from partition_layer.operations import meta_key
from partition_layer.partition_map import PartitionMap

CONFIG = PartitionManagerConfig()


def name(i: int) -> bytes:
    return meta_key("acct", f"log-{i:04d}")


def test_load_policy_builds_the_class_the_config_names() -> None:
    policy = load_policy(CONFIG)
    assert type(policy) is DefaultPolicy and policy.config is CONFIG


@pytest.mark.parametrize("dotted", ["partition_layer.no_such_module.Policy",
                                    "partition_layer.balance_policy.NoSuchPolicy",
                                    "partition_layer.balance_policy.Action"])
def test_a_policy_that_cannot_be_imported_is_a_clear_error(dotted: str) -> None:
    config = dataclasses.replace(CONFIG, policy=dotted)
    with pytest.raises(InvalidArgument, match=r"partition_manager\.policy"):
        load_policy(config)


def test_snapshot_from_the_map_and_heartbeats() -> None:
    current = PartitionMap.bootstrap([name(100)]).assigned({1: "ps-1", 2: "ps-2"})
    loads = {1: pb.PartitionLoad(partition_id=1, state="serving", ops_per_s=12.5,
                                 bytes_per_s=900.0, p99_ms=3.0, queue_ops=4, size_bytes=77,
                                 samples=[pb.LoadSample(key=name(5), left=1, right=2,
                                                        contained=3)],
                                 requests_sampled=6, size_split_key=name(7)),
             2: pb.PartitionLoad(partition_id=2, state="loading", ops_per_s=99.0)}
    snap = snapshot_from(current, loads, ["ps-2", "ps-1", "ps-1"], {2: 100.0}, now=130.0)
    assert snap.servers == ("ps-1", "ps-2")
    first, second = snap.partitions
    assert first == PartitionSnapshot(1, b"", name(100), "ps-1", 12.5, 900.0, 3.0, 4, 77,
                                      ((name(5), 1, 2, 3),), 6, name(7), None)
    # Not serving yet: no load counted; its age is kept for the cooldown.
    assert (second.id, second.ops_per_s, second.changed_s_ago) == (2, 0.0, 30.0)
    assert second.high is None and second.size_split_key is None


def test_an_idle_stamp_does_nothing() -> None:
    snap = LoadSnapshot(("ps-1", "ps-2"), (PartitionSnapshot(1, b"", None, "ps-1"),))
    assert DefaultPolicy(CONFIG).decide(snap).actions == ()
