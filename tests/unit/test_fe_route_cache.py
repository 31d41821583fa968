"""The front end's route cache (frontend/forward.py `route_name`): a partition name's server
is remembered only while the map is the same; a refreshed map is routed afresh, and a name
with no live server is never remembered."""

from __future__ import annotations

from common.config import PartitionLimits
from frontend.forward import ForwardingClient
from partition_layer.partition_map import PartitionEntry, PartitionMap
from partition_layer.requests import route_key


def one_partition(version: int, server: str) -> PartitionMap:
    return PartitionMap(version, (PartitionEntry(1, b"", None, server),))


def test_a_route_is_remembered_until_the_map_changes() -> None:
    client = ForwardingClient(["127.0.0.1:1"], PartitionLimits())
    assert client.route_name("acme", "orders") is None  # no map yet: the slow path
    client.map, client.addresses = one_partition(1, "ps-1"), {"ps-1": "127.0.0.1:7001"}
    assert client.route_name("acme", "orders") == ("ps-1", "127.0.0.1:7001")
    assert client.route_name("acme", "orders") == client.route(route_key("acme", "orders"))
    # A refresh replaces map and addresses together: the partition moved to ps-2.
    client.map, client.addresses = one_partition(2, "ps-2"), {"ps-2": "127.0.0.1:7002"}
    assert client.route_name("acme", "orders") == ("ps-2", "127.0.0.1:7002")


def test_a_name_without_a_live_server_is_not_remembered() -> None:
    client = ForwardingClient(["127.0.0.1:1"], PartitionLimits())
    client.map, client.addresses = one_partition(1, "ps-1"), {}
    assert client.route_name("acme", "orders") is None
    client.addresses["ps-1"] = "127.0.0.1:7001"  # its address learned
    assert client.route_name("acme", "orders") == ("ps-1", "127.0.0.1:7001")
