"""Reading `<data dir>/stamp.json`, the record a local stamp keeps of its processes (written by
tools/local_stamp.py): clients in every layer find their servers' addresses here.

Contract: a process that reads a stamp's record talks to its processes as the stamp's
operator from then on (common/tls.py: mutual TLS with `<tls dir>/operator.crt` when the record
names a TLS directory, `tls`; plain connections when it names none; to front ends with a
public certificate, trusting the CA the record names for it, `front_end_ca`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common import tls
from common.errors import NotFound

STAMP_FILE = "stamp.json"
# Present when the front ends show a public certificate: the CA file that issued it ("": the
# system's trusted roots).
PUBLIC_CA = "front_end_ca"


def read_stamp(data_dir: str | Path) -> dict[str, Any]:
    path = Path(data_dir).resolve() / STAMP_FILE
    try:
        raw: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise NotFound(f"no stamp in {path.parent} (no {STAMP_FILE}): run 'stamp up' "
                       f"first") from None
    _trust(raw)
    return raw


def _trust(raw: dict[str, Any]) -> None:
    """Talk to the recorded processes as the stamp's operator (module docstring)."""
    tls_dir = raw.get("tls")
    processes = raw.get("processes", {}).values()
    operator = tls.load(tls_dir, tls.OPERATOR) if tls_dir else None
    tls.trust([p.get("address", "") for p in processes], operator)
    if operator is not None and PUBLIC_CA in raw:  # front ends with a public certificate
        tls.trust([p.get("address", "") for p in processes if p.get("kind") == "front-end"],
                  tls.trusting(operator, raw[PUBLIC_CA]))


def addresses_of(data_dir: str | Path, kind: str) -> list[str]:
    """gRPC addresses of every process of `kind` (e.g. "stream-manager"), in name order."""
    processes = read_stamp(data_dir)["processes"]
    found = [p["address"] for _, p in sorted(processes.items()) if p["kind"] == kind]
    if not found:
        raise NotFound(f"the stamp in {data_dir} has no {kind} processes")
    return found
