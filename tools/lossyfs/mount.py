"""Mount, cut and remount a lossy file system from a test or a tool.

A power cut of a whole stamp (`power_cut`): freeze the file system, SIGKILL every process of
the stamp at once, let the file system go on (so the dead processes' requests end), roll the
backing tree back to what was durable, unmount, mount again. The stamp's processes can then
be started on what a machine would have found after the power came back.

Needs FUSE: /dev/fuse, libfuse 3 (`fusermount3`) and the `mfusepy` package; `available()`
says whether this machine has them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from common import process
from common.errors import Unavailable

MOUNT_TIMEOUT_S = 15.0
CUT_TIMEOUT_S = 60.0


def available() -> str | None:
    """None when FUSE can be used here, else why not (one line)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (install the fuse3 package)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot load libfuse: {exc}"
    return None


class LossyMount:
    """One lossy file system: `backing` holds the files, `mountpoint` shows them."""

    def __init__(self, backing: str | Path, mountpoint: str | Path,
                 always_durable: tuple[str, ...] = ()) -> None:
        """`always_durable`: file names a cut keeps whole (process logs, for post-mortems)."""
        self.backing = Path(backing)
        self.always_durable = always_durable
        self.mountpoint = Path(mountpoint)
        self.control = self.backing.parent / f"{self.backing.name}.control"
        self.log_path = self.backing.parent / f"{self.backing.name}.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.cuts = 0

    def start(self) -> None:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tools.lossyfs", str(self.backing), str(self.mountpoint),
                 "--control", str(self.control),
                 *(f"--always-durable={name}" for name in self.always_durable)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not (os.path.ismount(self.mountpoint) and self.control.exists()):
            if self.popen.poll() is not None or time.monotonic() > deadline:
                self._kill_daemon()
                raise Unavailable(f"lossyfs did not mount on {self.mountpoint}; see "
                                  f"{self.log_path}")
            time.sleep(0.01)

    def command(self, command: str, timeout_s: float = CUT_TIMEOUT_S) -> dict[str, object]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(self.control))
            conn.sendall(command.encode() + b"\n")
            with conn.makefile("rb") as stream:
                reply = json.loads(stream.readline())
        if not reply.get("ok"):
            raise Unavailable(f"lossyfs {command} failed: {reply.get('error')}")
        return reply

    def freeze(self) -> None:
        """Stop the file system answering: a process's next write or fsync never returns."""
        assert self.popen is not None
        os.kill(self.popen.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.popen is not None
        os.kill(self.popen.pid, signal.SIGCONT)

    def cut(self) -> dict[str, object]:
        """Throw away everything not durable and unmount. Every process that used the mount
        must be dead. Returns what the cut dropped."""
        report = self.command("cut")
        self.unmount()
        self.cuts += 1
        return report

    def unmount(self) -> None:
        """Unmount (keeping every write, synced or not) and wait for the daemon to end."""
        if os.path.ismount(self.mountpoint):
            result = subprocess.run(["fusermount3", "-u", str(self.mountpoint)],
                                    capture_output=True, text=True)
            if result.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)],
                               capture_output=True)
        if self.popen is not None:
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill_daemon()
            self.popen = None

    def _kill_daemon(self) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGCONT)
                os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=10)
            self.popen = None
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True)

    def close(self) -> None:
        """Teardown: never leaves a mount or a daemon behind."""
        with contextlib.suppress(ProcessLookupError):
            if self.popen is not None:
                os.kill(self.popen.pid, signal.SIGCONT)
        self.unmount()  # kills the daemon if it does not end by itself


def power_cut(pids: list[int], mount: LossyMount) -> dict[str, object]:
    """Cut the power under `pids` (every process using the mount): freeze the file system,
    SIGKILL them all, wait until they are gone, roll back, unmount and mount again."""
    mount.freeze()
    try:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        mount.thaw()  # the dead processes' requests in flight must end for them to exit
    deadline = time.monotonic() + 30.0
    for pid in pids:
        while process.is_alive(pid):  # a zombie counts as dead: its files are closed
            if time.monotonic() > deadline:
                raise Unavailable(f"process {pid} outlived the power cut")
            time.sleep(0.01)
    report = mount.cut()
    mount.start()
    return report
