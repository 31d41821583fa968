"""Stamp's client SDK: logs, entities with ETags, batches and scans of one account, through a
stamp's front ends, in Stamp's public protocol (`stamp.frontend.v1.FrontEnd`).

    from stampsdk import Client                      # blocking, thread-safe
    from stampsdk.aio import Client as AsyncClient   # asyncio, the same API

    with Client.from_connection_string(text) as c:
        first = c.append("orders", [b"r1", b"r2"])
        etag = c.put("users", "alice", b"Oslo")

Every call checks its arguments (InvalidArgument), is signed, carries CRC32Cs end to end,
and is retried on another front end when one fails (stampsdk/aio.py says how). Errors are
stampsdk.errors' StampError subclasses, and nothing else. The SDK imports nothing of the
server: it depends on grpcio, protobuf and crc32c only.
"""

from __future__ import annotations

from stampsdk import errors
from stampsdk.aio import Client as AsyncClient
from stampsdk.client import Client, ScanIterator
from stampsdk.connection_string import ConnectionString
from stampsdk.errors import StampError
from stampsdk.limits import Limits
from stampsdk.retry import RetryPolicy
from stampsdk.scan import Entity, Page

__all__ = ["AsyncClient", "Client", "ConnectionString", "Entity", "Limits", "Page",
           "RetryPolicy", "ScanIterator", "StampError", "errors"]
__version__ = "0.1.0"
