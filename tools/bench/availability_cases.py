"""The cases of `stamp bench availability` (tools/bench/availability.py): which processes it
faults (roles) and how (faults). Apart from the bench so the CLI can check `--roles` and
`--faults` without importing the bench's clients."""

from __future__ import annotations

ROLES = ("lock-leader", "lock-follower", "sm-leader", "pm-leader", "en-primary",
         "en-secondary", "ps", "fe")
FAULTS = ("freeze-5s", "freeze-30s", "isolate-30s", "kill", "slow-disk")
EXTENT_NODE_ROLES = ("en-primary", "en-secondary")
# How long each fault is held before it ends (a kill ends at once: the process is started
# again once the writers are appending).
HOLD_S = {"freeze-5s": 5.0, "freeze-30s": 30.0, "isolate-30s": 30.0, "kill": 0.0,
          "slow-disk": 10.0}


def cases(roles: tuple[str, ...], faults: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every (role, fault) asked for that applies: the slow disk only to extent nodes."""
    return [(role, fault) for role in roles for fault in faults
            if fault != "slow-disk" or role in EXTENT_NODE_ROLES]
