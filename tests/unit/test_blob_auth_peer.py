"""The Azure Blob endpoint's key lookups count against the connection they came on
(frontend/auth.py's per-peer bound, LOOKUPS_PER_PEER_MAX), as the gRPC door's do: without a
peer only the bound in all applies, and one connection's made-up account names could take
every lookup of the front end (issue 29, part B)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from frontend import blob_request, blob_server
from frontend.blob_model import BlobError


def _peers_asked(peername: tuple[str, int]) -> list[str]:
    asked: list[str] = []

    async def keys(account: str, peer: str = "") -> None:
        asked.append(peer)
        return None  # no such account: refused, as a bad signature is
    transport = SimpleNamespace(get_extra_info=lambda name, default=None:
                                peername if name == "peername" else default)
    http = SimpleNamespace(method="GET", headers={"Authorization": "SharedKey made-up:x"},
                           remote=peername[0], transport=transport, raw_path="/made-up/c/b",
                           query={})
    front_end = SimpleNamespace(counters=SimpleNamespace(requests=0),
                                auth=SimpleNamespace(account=keys))
    request = blob_request.BlobRequest(http, "id", "made-up", "c", "b", {})  # type: ignore[arg-type]
    with pytest.raises(BlobError):
        asyncio.run(blob_server.authorize(request, front_end, 900.0))  # type: ignore[arg-type]
    return asked


def test_each_connection_is_its_own_peer() -> None:
    first = _peers_asked(("10.0.0.1", 5001))
    second = _peers_asked(("10.0.0.1", 5002))
    assert first and all(first), "the lookup named no peer"
    assert first != second, "two connections of one host were one peer"
