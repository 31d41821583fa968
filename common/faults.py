"""Fault points: named places in production code that a test can arm to delay, fail or
crash the process (FoundationDB's BUGGIFY). Inert unless armed: an unarmed point is one dict
lookup.

Arming, in a process:
- from the environment at start: STAMP_FAULTS="name=action[:arg][,after=N][,times=N]; ..."
  e.g. STAMP_FAULTS="journal.before_fsync=delay:200; en.forward.after_send=crash,after=50"
- at run time through the Faults gRPC service (`common.rpc`) of a server started with
  `--faults-rpc`; a server started without it arms nothing from the environment either,
- or in-process with `arm(...)` (unit tests).

Actions: `delay:MS` sleeps, `fail` raises FaultInjected, `bug` raises FaultBug (a RuntimeError,
no Stamp error: the unexpected exception a bug throws, which code that catches only Stamp
errors lets through), `crash` SIGKILLs the process itself (nothing is flushed, exactly as
kill -9 from outside), `torn` is for points whose code does a custom partial action (the
journal writes half a batch, then crashes), `flip` is for points that pass bytes on: they
flip one bit of them (`flipped`), so a test can prove a checksum downstream catches it.
`after=N` lets the first N hits pass; `times=N` disarms after N firings.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass

from common.errors import FaultInjected, InvalidArgument

log = logging.getLogger(__name__)

ACTIONS = ("delay", "fail", "bug", "crash", "torn", "flip")
ENV_VAR = "STAMP_FAULTS"
# Servers serve the Faults service (and read ENV_VAR) only when started with --faults-rpc
# (common/server_main.py). "1" here: the local stamps and lock groups this process starts
# pass it (tests/conftest.py sets it for the test session).
RPC_ENV_VAR = "STAMP_FAULTS_RPC"


class FaultBug(RuntimeError):
    """What the `bug` action raises: deliberately outside common.errors' hierarchy."""


@dataclass
class FaultSpec:
    action: str
    arg: float = 0.0
    after: int = 0
    times: int | None = None
    hits: int = 0
    fired: int = 0

    def describe(self) -> str:
        arg = f":{self.arg:g}" if self.action == "delay" else ""
        return (f"{self.action}{arg},after={self.after},times={self.times},"
                f"hits={self.hits},fired={self.fired}")


_armed: dict[str, FaultSpec] = {}
_lock = threading.Lock()


def arm(name: str, action: str, arg: float = 0.0, after: int = 0,
        times: int | None = None) -> None:
    if action not in ACTIONS:
        raise InvalidArgument(f"unknown fault action {action!r}; one of {', '.join(ACTIONS)}")
    with _lock:
        _armed[name] = FaultSpec(action, arg, after, times)
    log.warning("fault point %s armed: %s", name, _armed[name].describe())


def disarm(name: str | None = None) -> None:
    """Disarm one point, or all of them when `name` is None."""
    with _lock:
        if name is None:
            _armed.clear()
        else:
            _armed.pop(name, None)


def armed() -> dict[str, str]:
    with _lock:
        return {name: spec.describe() for name, spec in _armed.items()}


def parse(text: str) -> list[tuple[str, str, float, int, int | None]]:
    """Parse the STAMP_FAULTS syntax into (name, action, arg, after, times) tuples."""
    parsed = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        name, sep, rest = item.partition("=")
        if not sep or not name.strip():
            raise InvalidArgument(f"fault spec {item!r} is not name=action[...]")
        action_part, *options = rest.split(",")
        action, _, arg = action_part.strip().partition(":")
        after, times = 0, None
        for option in options:
            key, _, value = option.strip().partition("=")
            if key == "after":
                after = int(value)
            elif key == "times":
                times = int(value)
            else:
                raise InvalidArgument(f"unknown fault option {key!r} in {item!r}")
        parsed.append((name.strip(), action, float(arg or 0), after, times))
    return parsed


def arm_from_env() -> None:
    for name, action, arg, after, times in parse(os.environ.get(ENV_VAR, "")):
        arm(name, action, arg, after, times)


def hit(name: str) -> FaultSpec | None:
    """Count a hit at `name`; return its spec if it fires now, else None."""
    if not _armed:
        return None
    with _lock:
        spec = _armed.get(name)
        if spec is None:
            return None
        spec.hits += 1
        if spec.hits <= spec.after:
            return None
        spec.fired += 1
        if spec.times is not None and spec.fired >= spec.times:
            del _armed[name]
    # Logged, so a test can wait until a point has fired (e.g. before it kills the process).
    log.warning("fault point %s fired: %s", name, spec.action)
    return spec


def flipped(name: str, data: bytes) -> bytes:
    """`data`, with one bit of its middle byte flipped if the point `name` is armed with
    `flip` and fires now (a corruption in transit or at rest; empty data stays empty). Any
    other action fires as at `point`."""
    spec = hit(name)
    if spec is None:
        return data
    if spec.action != "flip":
        _act(name, spec)
        return data
    if not data:
        return data
    middle = len(data) // 2
    return data[:middle] + bytes((data[middle] ^ 0x01,)) + data[middle + 1:]


def crash(name: str) -> None:
    log.critical("fault point %s: crashing the process (SIGKILL)", name)
    os.kill(os.getpid(), signal.SIGKILL)


def point(name: str) -> None:
    """A fault point on a thread (blocking code)."""
    spec = hit(name)
    if spec is not None:
        _act(name, spec)


def _act(name: str, spec: FaultSpec) -> None:
    if spec.action == "delay":
        time.sleep(spec.arg / 1000.0)
    elif spec.action == "fail":
        raise FaultInjected(f"fault injected at {name}")
    elif spec.action == "bug":
        raise FaultBug(f"bug injected at {name}")
    elif spec.action == "crash":
        crash(name)


async def apoint(name: str) -> None:
    """A fault point on the event loop: a delay sleeps without blocking the loop."""
    spec = hit(name)
    if spec is None:
        return
    if spec.action == "delay":
        await asyncio.sleep(spec.arg / 1000.0)
    elif spec.action == "fail":
        raise FaultInjected(f"fault injected at {name}")
    elif spec.action == "bug":
        raise FaultBug(f"bug injected at {name}")
    elif spec.action == "crash":
        crash(name)
