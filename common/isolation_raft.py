"""The Raft half of a network partition (common/isolation.py): pysyncobj talks TCP between
replicas, not gRPC, so its transport gets the cut here.

While a peer's Raft address is cut, this replica sends it nothing, takes nothing from it
(messages on a connection made before the cut included), opens no connection to it, refuses
the connections it opens, and closes the ones that exist, on its next tick. `common/raft.py`
builds its transport on this class; everything else there is untouched.
"""

from __future__ import annotations

from typing import Any

from pysyncobj.tcp_connection import CONNECTION_STATE
from pysyncobj.transport import TCPTransport

from common import isolation


def _address(node: Any) -> str | None:
    return getattr(node, "address", None)  # read-only nodes have none (Stamp uses none)


class IsolatingTransport(TCPTransport):
    """pysyncobj's TCP transport, deaf and mute towards cut peers (see the module)."""

    def send(self, node: Any, message: Any) -> bool:
        if isolation.is_cut(_address(node)):
            return False
        return super().send(node, message)

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        if isolation.is_cut(_address(node)):
            return
        super()._onMessageReceived(node, message)

    def _onIncomingMessageReceived(self, conn: Any, message: Any) -> None:
        # The first message on a connection a peer opened is its Raft address.
        if isinstance(message, str) and isolation.is_cut(message):
            self._unknownConnections.discard(conn)
            conn.disconnect()
            return
        super()._onIncomingMessageReceived(conn, message)

    def _connectIfNecessarySingle(self, node: Any) -> bool:
        if isolation.is_cut(_address(node)):
            return False
        return super()._connectIfNecessarySingle(node)

    def _onTick(self) -> None:
        if isolation.cut_peers():
            for node, conn in list(self._connections.items()):
                if (isolation.is_cut(_address(node))
                        and conn.state != CONNECTION_STATE.DISCONNECTED):
                    conn.disconnect()
        super()._onTick()
