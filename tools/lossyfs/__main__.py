"""The lossy file system daemon: `python -m tools.lossyfs BACKING MOUNTPOINT --control SOCK`.

Mounts a `LossyTree` on BACKING at MOUNTPOINT (FUSE, in the foreground) and answers one-line
commands on the Unix socket SOCK, each with one line of JSON:
- `status`: what is tracked (files, directories, undo bytes);
- `cut`: the power cut. Rolls BACKING back to what was durable and refuses every operation
  from then on; the caller then unmounts (`fusermount3 -u`), which ends the daemon.
Call `cut` only when every process that used the mount is dead (see tools/lossyfs/mount.py)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import threading
from pathlib import Path

import mfusepy as fuse

from tools.lossyfs.fs import LossyFS
from tools.lossyfs.tree import LossyTree

log = logging.getLogger("lossyfs")


def serve_control(tree: LossyTree, path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(4)
        while True:
            conn, _ = server.accept()
            with conn, conn.makefile("rwb") as stream:
                for line in stream:
                    command = line.decode().strip()
                    try:
                        if command == "status":
                            reply = {"ok": True, **tree.pending()}
                        elif command == "cut":
                            reply = {"ok": True, **tree.cut().as_dict()}
                            log.warning("power cut: %s", reply)
                        else:
                            reply = {"ok": False, "error": f"unknown command {command!r}"}
                    except Exception as exc:  # the harness must hear of it, not hang
                        log.exception("control command %s failed", command)
                        reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                    stream.write(json.dumps(reply).encode() + b"\n")
                    stream.flush()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.lossyfs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("backing", type=Path, help="directory that holds the real files")
    parser.add_argument("mountpoint", type=Path, help="where the lossy tree is mounted")
    parser.add_argument("--control", type=Path, required=True, help="Unix socket for commands")
    parser.add_argument("--always-durable", action="append", default=[], metavar="NAME",
                        help="a file name a cut never loses (e.g. server.log); repeatable")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tree = LossyTree(args.backing, frozenset(args.always_durable))
    args.control.unlink(missing_ok=True)
    threading.Thread(target=serve_control, args=(tree, args.control), daemon=True).start()
    log.info("mounting %s on %s (pid %d)", args.backing, args.mountpoint, os.getpid())
    # No attribute or entry caching: a cut changes the backing files under the kernel's feet
    # only after every user is dead, but the mount may be reused by `status` readers.
    fuse.FUSE(LossyFS(tree), str(args.mountpoint), foreground=True, nothreads=False,
              fsname="lossyfs", attr_timeout=0, entry_timeout=0, negative_timeout=0)


if __name__ == "__main__":
    main()
