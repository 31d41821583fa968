"""How a front end reaches the partition layer (§6): the partition client, routing by its
cached partition map (refreshed on NotOwner, then retried), plus what a front end needs
beyond it:

- `route(key)`: the partition server (name and address) the cached map names for a key,
  without awaiting — the hot path forwards on that server's session directly, and the
  throttle needs the server's name; `route_name(account, pname)` the same for a partition
  name, remembered until the map changes (every request is routed; the same few names come
  by thousands a second);
- every session reports the ServerPressure its server sends to `on_pressure` (throttling).
Subscriptions are the partition client's `subscribe_replies` (whole replies, each record with
its CRC32C for the SDK to verify end to end, across partition moves).
"""

from __future__ import annotations

from collections.abc import Sequence

from common.config import PartitionLimits
from partition_layer.client import AsyncPartitionClient
from partition_layer.requests import route_key
from partition_layer.session import CallSession, PressureHook

ROUTES_CACHED_MAX = 65_536  # (account, partition name) -> server remembered per map


class ForwardingClient(AsyncPartitionClient):
    def __init__(self, pm_addresses: Sequence[str], limits: PartitionLimits,
                 on_pressure: PressureHook | None = None) -> None:
        super().__init__(pm_addresses, limits, on_pressure=on_pressure)
        self._routes: dict[tuple[str, str], tuple[str, str]] = {}
        self._routes_map = self.map

    def route(self, key: bytes) -> tuple[str, str] | None:
        """(server name, address) the cached map names for `key`; None if there is no map
        yet or that partition has no live server (the caller takes the slow path)."""
        if self.map is None:
            return None
        server = self.map.lookup(key).server
        address = self.addresses.get(server)
        return None if address is None else (server, address)

    def route_name(self, account: str, pname: str) -> tuple[str, str] | None:
        """`route` of the key of (account, pname); remembered while the map is the same
        (the map and the servers' addresses are replaced together, on a refresh)."""
        if self.map is not self._routes_map:
            self._routes.clear()
            self._routes_map = self.map
        route = self._routes.get((account, pname))
        if route is None:
            route = self.route(route_key(account, pname))
            if route is not None:
                if len(self._routes) >= ROUTES_CACHED_MAX:
                    self._routes.clear()  # many distinct names: start over, stay bounded
                self._routes[(account, pname)] = route
        return route

    def session(self, address: str) -> CallSession:
        return self._session(address)

    def map_version(self) -> int:
        return self.map.version if self.map is not None else 0
