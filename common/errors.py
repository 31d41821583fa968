"""The one flat hierarchy of Stamp's errors, and their single mapping to gRPC status codes.

Contract: a server raises one of these; `common.rpc` turns it into a gRPC status whose
details name the class (trailing metadata key `stamp-error`), and the client side turns that
status back into the same class. Anything else that escapes a servicer is a bug and surfaces
as INTERNAL.
"""

from __future__ import annotations

import grpc


class StampError(Exception):
    """Base of every error Stamp raises on purpose."""

    grpc_code: grpc.StatusCode = grpc.StatusCode.UNKNOWN


class InvalidArgument(StampError):
    grpc_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(StampError):
    grpc_code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(StampError):
    grpc_code = grpc.StatusCode.ALREADY_EXISTS


class PreconditionFailed(StampError):
    """A condition the caller stated (ETag, expected offset, version) does not hold."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class WrongOffset(PreconditionFailed):
    """A secondary refuses a write that does not start at its current end (§2)."""


class Fenced(PreconditionFailed):
    """A newer owner (a higher fencing epoch) has taken the resource over: this writer's
    changes are refused for good (§8 invariant 3)."""


class Sealed(StampError):
    """The extent (or log) is sealed: no more appends."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class ExtentFull(StampError):
    """The append would grow the extent past its size limit; the stream moves on."""

    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Trimmed(StampError):
    grpc_code = grpc.StatusCode.OUT_OF_RANGE


class OutOfRange(StampError):
    grpc_code = grpc.StatusCode.OUT_OF_RANGE


class Throttled(StampError):
    grpc_code = grpc.StatusCode.RESOURCE_EXHAUSTED

    def __init__(self, message: str = "throttled", retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(StampError):
    """A replica, peer or service could not be reached or failed mid-operation."""

    grpc_code = grpc.StatusCode.UNAVAILABLE


class ReplicationFailed(Unavailable):
    """An append could not be made durable on all replicas; the extent must be sealed."""

    # The replica (address) whose per-replica timeout caused it, when that is why ("": not).
    late_replica: str = ""


class NotPrimary(StampError):
    grpc_code = grpc.StatusCode.FAILED_PRECONDITION


class NotOwner(Unavailable):
    """This partition server does not serve that key (any more): refresh the partition map
    and ask the owner it names (§4)."""


class NotLeader(Unavailable):
    """This replica of a Raft group is not the leader; `leader` names it when known."""

    def __init__(self, message: str = "not the leader", leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader


class Moved(StampError):
    """This stamp does not take the account's writes: it is the account's geo secondary
    here (issue 30; after a failover or a migration, its old primary). Reads may still be
    answered here; a write must go to the primary stamp, which the location service names
    (the SDK asks it again on this error).

    Not Unavailable, on purpose: the same request at the same stamp fails the same way until
    the account's role changes, so nothing may retry it here blindly. Clients react to the
    class name only (trailing metadata `stamp-error` / `Response.error` "Moved"); the
    message is for people, and its format is kept stable (`of` makes it):

        account NAME is not written at this stamp: its primary is stamp PRIMARY (epoch N)

    PRIMARY is "(unknown)" when this stamp was not told the primary's name."""

    grpc_code = grpc.StatusCode.FAILED_PRECONDITION

    @classmethod
    def of(cls, account: str, primary: str, epoch: int, write: bool = True) -> Moved:
        """A write (or, `write` False, a read not marked as a read of the secondary) of
        `account`, refused at its secondary stamp."""
        what = "written" if write else "read (but from its secondary, on purpose)"
        return cls(f"account {account} is not {what} at this stamp: its primary is stamp "
                   f"{primary or '(unknown)'} (epoch {epoch})")


class DeadlineExceeded(StampError):
    grpc_code = grpc.StatusCode.DEADLINE_EXCEEDED


class ChecksumError(StampError):
    """Bytes failed their CRC32C: never returned as data (§8, invariant 6)."""

    grpc_code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(StampError):
    grpc_code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(StampError):
    grpc_code = grpc.StatusCode.PERMISSION_DENIED


class FaultInjected(StampError):
    """Raised by an armed fault point (tests only; inert otherwise)."""

    grpc_code = grpc.StatusCode.UNAVAILABLE


class Internal(StampError):
    grpc_code = grpc.StatusCode.INTERNAL


def _all_subclasses(cls: type[StampError]) -> list[type[StampError]]:
    found: list[type[StampError]] = []
    for sub in cls.__subclasses__():
        found.append(sub)
        found.extend(_all_subclasses(sub))
    return found


ERRORS_BY_NAME: dict[str, type[StampError]] = {
    cls.__name__: cls for cls in [StampError, *_all_subclasses(StampError)]
}

# What a bare gRPC status (no `stamp-error` detail: a transport failure, a dead peer) means.
# Stamp's servers tag every error they send on purpose, their own Internal included, so an
# untagged INTERNAL or UNKNOWN comes from the transport (e.g. "Internal error from Core" when a
# stream's peer is SIGKILLed): the peer is unavailable, and the call may be retried elsewhere.
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
