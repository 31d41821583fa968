"""The nemesis: applies a schedule (tools/chaos/schedule.py) to a local stamp, on a thread,
one fault at a time, and records what it did.

Contract: every fault is undone before the next starts — a killed process is started again,
a frozen one thawed (SIGCONT), an isolated one healed, an armed fault point disarmed, a node
that stopped itself on an injected disk failure restarted, a stamp whose power was cut
brought up again — also when `stop()` cuts a fault's hold short. Between faults it starts
again any process that died on its own and records it (`crashes`): the schedule never asked
for that. Processes are handled by PID through LocalStamp, never by name.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from common import faults, rpc
from common.errors import StampError
from tools import cmd_isolate
from tools.chaos.schedule import Fault
from tools.chaos.stamp_faults import (
    Skipped,
    commit_log_nodes,
    flip_sealed_replica,
    partition_op,
)
from tools.local_stamp import LocalStamp
from tools.lossyfs.mount import LossyMount, power_cut

log = logging.getLogger(__name__)

RESTART_TIMEOUT_S = 90.0
RESTART_PAUSE_S = 1.0
DEATH_POLL_S = 0.05
JOIN_TIMEOUT_S = 300.0  # a power cut and the whole stamp's restart may be under way
CRASH_AFTER_FIRE_S = 10.0  # a node whose crashing fault point fired stops within this
FIRE_WAIT_S = 15.0  # an armed fault point nothing passed in this long is no fault
FIRE_POLL_S = 0.1


@dataclass
class FaultRecord:
    kind: str
    target: str
    at_s: float  # when the schedule wanted it
    start_s: float  # when it was applied, seconds from the run's start
    end_s: float = 0.0  # when it was undone
    outcome: str = "running"  # done, skipped, failed
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Nemesis:
    def __init__(self, stamp: LocalStamp, faults: list[Fault], account: str, started: float,
                 mount: LossyMount | None = None,
                 on_change: Callable[[FaultRecord], None] | None = None) -> None:
        self.stamp = stamp
        self.faults = faults
        self.account = account
        self.started = started
        self.mount = mount
        self.records: list[FaultRecord] = []
        self.crashes: list[tuple[float, str]] = []  # (when, process) that died on its own
        self.current: FaultRecord | None = None
        self._on_change = on_change or (lambda record: None)
        self._flipped: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="nemesis")
        self.failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop after undoing the fault under way (its hold cut short)."""
        self._stop.set()
        self._thread.join(JOIN_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError("the nemesis did not stop: a fault could not be undone")

    @property
    def finished(self) -> bool:
        """It played its whole schedule (or failed)."""
        return self._thread.ident is not None and not self._thread.is_alive()

    def now(self) -> float:
        return time.monotonic() - self.started

    def _run(self) -> None:
        try:
            for fault in self.faults:
                if self._stop.wait(max(0.0, fault.at_s - self.now())):
                    return
                self._restart_crashed()
                self._apply(fault)
            self._restart_crashed()
        except BaseException as exc:  # a bug in the nemesis: the run reports it
            log.exception("the nemesis failed")
            self.failure = exc

    def _apply(self, fault: Fault) -> None:
        record = FaultRecord(fault.kind, fault.target, fault.at_s, round(self.now(), 2),
                             detail=fault.detail)
        self.records.append(record)
        self.current = record
        self._on_change(record)
        try:
            record.detail = getattr(self, f"_{fault.kind}")(fault) or fault.detail
            record.outcome = "done"
        except Skipped as exc:
            record.outcome, record.detail = "skipped", str(exc)
        except (StampError, OSError, RuntimeError) as exc:
            record.outcome, record.detail = "failed", f"{type(exc).__name__}: {exc}"
            log.warning("fault %s on %s failed: %s", fault.kind, fault.target, exc)
        finally:
            record.end_s = round(self.now(), 2)
            self.current = None
            self._on_change(record)

    def _hold(self, seconds: float) -> None:
        self._stop.wait(seconds)  # the hold is the schedule, not a wait for a condition

    # ---- process faults --------------------------------------------------------------------

    def _kill(self, fault: Fault) -> str:
        self.stamp.kill(fault.target)
        self._hold(fault.hold_s)
        self._restart(fault.target)
        return "SIGKILL, then started again"

    def _freeze(self, fault: Fault) -> str:
        pid = self.stamp.record(fault.target).pid
        os.kill(pid, signal.SIGSTOP)
        try:
            self._hold(fault.hold_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        return "SIGSTOP, then SIGCONT"

    def _isolate(self, fault: Fault) -> str:
        cmd_isolate.isolate(self.stamp, fault.target)
        try:
            self._hold(fault.hold_s)
        finally:
            cmd_isolate.heal(self.stamp, fault.target)
        return "cut off from every peer, then healed"

    def _power_cut(self, fault: Fault) -> str:
        if self.mount is None:
            raise Skipped("the stamp is not on a lossy file system")
        report = power_cut(self.stamp.pids(), self.mount)
        self.stamp.forget_dead()
        self.stamp.up()
        return (f"dropped {report.get('bytes_dropped')} unsynced bytes and "
                f"{report.get('entries_dropped')} directory entries; restarted")

    # ---- fault points and disks --------------------------------------------------------------

    def _armed(self, fault: Fault, crash_expected: bool) -> str:
        """Arm `fault.detail` in the target until it first fires (FIRE_WAIT_S at most: a
        point nothing passed is no fault, Skipped), then for the hold, then disarm it. A
        node that stops itself (an injected journal failure or torn write: `crash_expected`,
        waited for up to CRASH_AFTER_FIRE_S after the firing, so that it is not taken for a
        crash of its own) is started again."""
        target, why = self._armed_target(fault)
        address = self.stamp.address(target)
        rpc.arm_remote(address, fault.detail)
        how = self._until_fired([target], fault.detail)
        died = how == "died"
        if how == "fired":
            died = self._wait_death(target,
                                    CRASH_AFTER_FIRE_S if crash_expected else fault.hold_s)
        if not died:
            rpc.disarm_remote(address)
        if how is None:  # the fault did not happen: say so, do not count it
            raise Skipped(f"{fault.detail}: never fired on {target} in "
                          f"{FIRE_WAIT_S:g}s (nothing passed the point), disarmed{why}")
        if died:
            self._restart(target)
            return f"{fault.detail}: the node stopped, started again{why}"
        return f"{fault.detail}{why}"

    def _armed_target(self, fault: Fault) -> tuple[str, str]:
        """The node to arm: the schedule's, or for a journal point when that node holds no
        open commit-log extent (nothing would pass the point), the one of those that
        `fault.pick` chooses (a choice only the running stamp can make); and why."""
        if not fault.detail.startswith("journal."):
            return fault.target, ""
        writing = commit_log_nodes(self.stamp)
        if not writing or fault.target in writing:
            return fault.target, ""
        target = writing[fault.pick % len(writing)]
        if self.current is not None:
            self.current.target = target
        return target, f" (on {target}: {fault.target} holds no open commit-log extent)"

    def _until_fired(self, names: list[str], spec: str) -> str | None:
        """"fired" once a point of `spec` fired in one of `names`, "died" if one stopped
        (a crashing point), None after FIRE_WAIT_S or when the nemesis is stopped."""
        deadline = time.monotonic() + FIRE_WAIT_S
        while True:
            for name in names:
                if not self.stamp.alive(name):
                    return "died"
                try:
                    if fired(spec, rpc.armed_remote(self.stamp.address(name))):
                        return "fired"
                except StampError:
                    pass  # stopping, or too busy to answer: look again
            if self._stop.wait(FIRE_POLL_S) or time.monotonic() > deadline:
                return None

    def _wait_death(self, name: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self.stamp.alive(name):
            if self._stop.wait(min(DEATH_POLL_S, max(0.0, deadline - time.monotonic()))) \
                    or time.monotonic() >= deadline:
                return not self.stamp.alive(name)
        return True

    def _slow_disk(self, fault: Fault) -> str:
        return self._armed(fault, crash_expected=False)

    def _failing_disk(self, fault: Fault) -> str:
        # A node whose journal cannot write stops; one whose reads fail goes on.
        return self._armed(fault, crash_expected="journal" in fault.detail)

    def _torn_write(self, fault: Fault) -> str:
        return self._armed(fault, crash_expected=True)

    def _flip_read(self, fault: Fault) -> str:
        addresses = [r.address for r in self.stamp.partition_servers()]
        for address in addresses:
            rpc.arm_remote(address, fault.detail)
        names = [r.name for r in self.stamp.partition_servers()]
        try:
            how = self._until_fired(names, fault.detail)
            if how is not None:
                self._hold(fault.hold_s)  # the hold runs from the first flipped read
        finally:
            for address in addresses:
                rpc.disarm_remote(address)
        if how is None:
            raise Skipped(f"{fault.detail}: no read passed it in {FIRE_WAIT_S:g}s")
        return f"{fault.detail} on {len(addresses)} partition servers"

    def _flip_disk(self, fault: Fault) -> str:
        return flip_sealed_replica(self.stamp, fault.target, fault.pick, self._flipped)

    # ---- partitions ------------------------------------------------------------------------

    def _split(self, fault: Fault) -> str:
        return partition_op(self.stamp, "split", self.account, fault.target, fault.pick)

    def _merge(self, fault: Fault) -> str:
        return partition_op(self.stamp, "merge", self.account, fault.target, fault.pick)

    def _move(self, fault: Fault) -> str:
        return partition_op(self.stamp, "move", self.account, fault.target, fault.pick)

    # ---- restarts --------------------------------------------------------------------------

    def _restart(self, name: str) -> None:
        """Start `name` again, trying until RESTART_TIMEOUT_S (a port may be slow to free)."""
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while True:
            self.stamp.forget_dead()
            if self.stamp.alive(name):
                return
            try:
                self.stamp.start(name)
                return
            except StampError as exc:
                if time.monotonic() > deadline:
                    raise
                log.warning("restarting %s failed (%s): again", name, exc)
                time.sleep(RESTART_PAUSE_S)

    def _restart_crashed(self) -> None:
        for name in self.stamp.forget_dead():
            self.crashes.append((round(self.now(), 2), name))
            log.warning("%s died on its own: starting it again", name)
            try:
                self._restart(name)
            except StampError as exc:
                log.warning("%s could not be started again: %s", name, exc)


def fired(spec: str, armed: dict[str, str]) -> bool:
    """Whether any fault point of `spec` (STAMP_FAULTS syntax) fired, from what the server
    says is armed (`armed`: name -> FaultSpec.describe, with `fired=N`); a point no longer
    armed was armed with times=N and fired them all."""
    for name, *_ in faults.parse(spec):
        described = armed.get(name)
        if described is None:
            return True
        count = re.search(r"fired=(\d+)", described)
        if count is not None and int(count.group(1)) > 0:
            return True
    return False


def restore(stamp: LocalStamp) -> list[str]:
    """After the nemesis: every process of the stamp running and the stamp healthy (nothing
    frozen, isolated or armed is left: the nemesis undid its faults). Returns the names that
    had to be started."""
    stamp.forget_dead()
    for rec in stamp.records.values():
        if rec.pid and stamp.alive(rec.name):
            os.kill(rec.pid, signal.SIGCONT)  # harmless when not stopped
    return stamp.up()
