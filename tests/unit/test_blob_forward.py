"""A secondary's blob writes passed on to the primary (frontend/blob_forward.py, issue 30):
when it must answer Moved itself instead (the forwarding path is tested against two real
stamps in tests/probe/test_geo_failover.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from common.errors import Moved, Unavailable
from frontend.blob_forward import FORWARDED_HEADER, BlobForwarder
from location.geo_auth import GeoSettings

SETTINGS = GeoSettings("west-1", ("127.0.0.1:9",), b"s" * 32)
MOVED = Moved.of("acme", "east-1", 2)


def forward(settings: GeoSettings | None, headers: dict[str, str],
            primary: tuple[str, tuple[str, ...]] | Exception | None = None) -> Any:
    async def read() -> GeoSettings | None:
        return settings

    forwarder = BlobForwarder(read)

    async def where(settings: GeoSettings, account: str) -> tuple[str, tuple[str, ...]]:
        if isinstance(primary, Exception):
            raise primary
        assert primary is not None, "the location was asked"
        return primary

    forwarder._primary = where  # type: ignore[method-assign]
    return asyncio.run(forwarder.forward(SimpleNamespace(headers=headers),  # type: ignore[arg-type]
                                         "acme", MOVED))


@pytest.mark.parametrize(("settings", "headers", "primary"), [
    (None, {}, None),  # in no location
    (SETTINGS, {FORWARDED_HEADER: "east-1"}, None),  # forwarded once already: no loop
    (SETTINGS, {}, Unavailable("the location is down")),
    (SETTINGS, {}, ("east-1", ())),  # the primary has no blob endpoint
    (SETTINGS, {}, ("west-1", ("http://127.0.0.2:1",))),  # names this stamp
])
def test_the_secondary_answers_moved_itself_when_it_cannot_pass_a_write_on(
        settings: GeoSettings | None, headers: dict[str, str], primary: Any) -> None:
    with pytest.raises(Moved, match="its primary is stamp east-1"):
        forward(settings, headers, primary)
