"""common/process.free_port: ports handed out by one process never repeat, though none is
bound until the process it is for starts (a stamp plans some 60 at once)."""

from __future__ import annotations

from common import process


def test_ports_picked_in_a_row_are_all_different() -> None:
    ports = [process.free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
