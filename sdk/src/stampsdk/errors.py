"""The errors the SDK raises: one flat hierarchy, and nothing else escapes a call.

A front end names the error of a refused request by its class name (a `Response.error`, or
a gRPC status whose trailing metadata `stamp-error` names it); `from_name` and
`from_rpc_error` turn that back into the class of the same name here. Names of the
server's own errors that a caller cannot act on apart (a fenced writer, a Raft follower)
come back as their public base (`ALIASES`); a name this SDK does not know is `Internal`,
with the name in the message. A transport failure (no name) is `Unavailable`.
SecondaryNotLive is the SDK's own (a client reading from the secondary refuses a read
itself): no server names it, and it is not in ERRORS_BY_NAME.

Contract: the retried errors are Unavailable (NotOwner is one), Throttled (after its
`retry_after_s`) and DeadlineExceeded on an idempotent call (stampsdk/retry.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

import grpc

ERROR_KEY = "stamp-error"  # trailing metadata naming the error's class
RETRY_AFTER_KEY = "stamp-retry-after-ms"  # with Throttled: when to try again


class StampError(Exception):
    """Base of every error the SDK raises."""


class InvalidArgument(StampError):
    """An argument breaks a rule or a limit (the message names it); also: a closed client."""


class NotFound(StampError):
    """No such row (get, delete)."""


class AlreadyExists(StampError):
    """The thing to create exists already."""


class PreconditionFailed(StampError):
    """A condition the caller stated (an ETag: `if_match`, `if_none_match`) does not hold."""


class Sealed(StampError):
    """The log is sealed: no more appends."""


class Trimmed(StampError):
    """The records asked for were trimmed away."""


class OutOfRange(StampError):
    """A position past the log's end."""


class Throttled(StampError):
    """The account is over its share for now; try again after `retry_after_s`."""

    def __init__(self, message: str = "throttled", retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(StampError):
    """No front end (or nothing behind it) could be reached in time, or one failed mid-call."""


class NotOwner(Unavailable):
    """A partition is moving between servers (retried)."""


class DeadlineExceeded(StampError):
    """No answer came within the call's time."""


class ChecksumError(StampError):
    """Bytes failed their CRC32C: never returned as data."""


class Unauthenticated(StampError):
    """A bad or rotated key, an expired or malformed token, a clock more than 5 minutes off."""


class PermissionDenied(StampError):
    """Valid credentials, but not for this (a token's permission or name prefix)."""


class Moved(StampError):
    """The stamp asked is not the account's primary (issue 30: the account failed over or
    migrated, or this is its secondary): its message names the primary. A client whose
    connection string names a `Location` asks the location again and goes on there; one
    with fixed `Endpoint`s raises this."""


class SecondaryNotLive(StampError):
    """A read of a client that reads from the account's secondary (`ReadFrom=secondary`,
    issue 30: read access to the secondary) was refused, before anything was sent, because
    the location says the secondary is not live: it is being bootstrapped (its copy is not
    whole yet), or it is `unavailable` (an old primary after an unplanned failover, whose
    copy may hold writes the new primary never saw). Such a copy is never read, and the read
    is not sent to the primary instead: read from the primary (a client without
    `ReadFrom=secondary`) to read at all. `state` is what the location said. Not retried:
    a secondary turns live in minutes, not within a call. The SDK's own: no server names
    it."""

    def __init__(self, message: str = "the secondary is not live", state: str = "") -> None:
        super().__init__(message)
        self.state = state


class Internal(StampError):
    """The stamp failed in a way it did not mean to (a bug), or named an unknown error."""


ERRORS_BY_NAME: dict[str, type[StampError]] = {
    cls.__name__: cls for cls in (
        StampError, InvalidArgument, NotFound, AlreadyExists, PreconditionFailed, Sealed,
        Trimmed, OutOfRange, Throttled, Unavailable, NotOwner, DeadlineExceeded,
        ChecksumError, Unauthenticated, PermissionDenied, Moved, Internal)
}
# The server's own refinements, as the public class a caller handles them by.
ALIASES: dict[str, type[StampError]] = {
    "WrongOffset": PreconditionFailed, "Fenced": PreconditionFailed,
    "ReplicationFailed": Unavailable, "NotLeader": Unavailable, "FaultInjected": Unavailable,
    "ExtentFull": Unavailable, "NotPrimary": Unavailable,
}
# What a bare gRPC status (no error name: a transport failure, a dead front end) means.
ERRORS_BY_CODE: dict[grpc.StatusCode, type[StampError]] = {
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.INTERNAL: Unavailable,
    grpc.StatusCode.UNKNOWN: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Unavailable,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.DATA_LOSS: ChecksumError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: Throttled,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
}


def from_name(kind: str, message: str) -> StampError:
    """The error a front end named `kind` (module docstring)."""
    cls = ERRORS_BY_NAME.get(kind) or ALIASES.get(kind)
    if cls is None:
        return Internal(f"{kind}: {message}")
    return cls(message)


def from_rpc_error(exc: Any) -> StampError:
    """The typed error behind a failed gRPC call (transport failures become Unavailable)."""
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(code)
    metadata = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
    kind = metadata.get(ERROR_KEY)
    if kind == Throttled.__name__:
        with contextlib.suppress(ValueError):
            return Throttled(details, retry_after_s=int(metadata.get(RETRY_AFTER_KEY, "")) / 1000)
    if kind is not None:
        return from_name(kind, details)
    return ERRORS_BY_CODE.get(code, Unavailable)(f"{code.name}: {details}")
