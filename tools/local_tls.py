"""A local stamp's certificates (§9, common/tls.py), for tools/local_stamp.py.

- `stamp up` makes the stamp's CA in `<data dir>/tls/` once (a stamp of one machine; a stamp
  across hosts finds a copy of one CA there on every host and never makes its own), and
  issues each process a certificate for its host before its first start, and the operator's
  client certificate for the `stamp` CLI and tests.
- Processes get `--tls-dir DIR` (a path; the keys stay in their 0600 files), and stamp.json
  records the directory (`tls`), so that tools which find the stamp there talk to it with the
  operator's certificate (common/stamp_file.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from common import tls
from common.errors import InvalidArgument
from common.stamp_file import PUBLIC_CA

if TYPE_CHECKING:
    from tools.local_stamp import LocalStamp

TLS_DIR_ARG = "--tls-dir"


def tls_dir(stamp: LocalStamp) -> Path:
    return tls.dir_in(stamp.data_dir)


def server_flags(stamp: LocalStamp) -> list[str]:
    """The TLS option of every server of `stamp` (none: plain connections)."""
    return [TLS_DIR_ARG, str(tls_dir(stamp))] if stamp.tls else []


def ensure_certificates(stamp: LocalStamp, names: Sequence[str]) -> None:
    """Before `names` start: the CA (made on a stamp of one machine), a certificate for each
    of them (for its host) and the operator's, each issued once."""
    if not stamp.tls:
        return
    directory = tls_dir(stamp)
    if not stamp.config.hosts:
        tls.make_ca(directory)
    elif not tls.has_ca_key(directory):
        raise InvalidArgument(
            f"no stamp CA in {directory}: every host of a stamp across hosts needs a copy of "
            f"the same ca.crt and ca.key there (make them once with 'python -m common.tls "
            f"make-ca DIR', then copy them to each host)")
    for name in names:
        tls.ensure_issued(directory, name, [stamp.config.host_of(name)])
    tls.ensure_issued(directory, tls.OPERATOR, [], server=False)


def trust(stamp: LocalStamp) -> None:
    """This process talks to the stamp's processes as its operator (plain without TLS),
    trusting the front ends' public CA for them when they show a public certificate."""
    identity = tls.load(tls_dir(stamp), tls.OPERATOR) if stamp.tls else None
    tls.trust([rec.address for rec in stamp.records.values()], identity)
    if identity is not None and stamp.config.security.front_end_cert:
        tls.trust([rec.address for rec in stamp.front_ends()],
                  tls.trusting(identity, stamp.config.security.front_end_ca))


def record(stamp: LocalStamp) -> dict[str, str | None]:
    """What stamp.json says of TLS: the directory's path (None: no TLS) and, with a public
    certificate at the front ends, the CA file that issued it (common/stamp_file.py)."""
    found: dict[str, str | None] = {"tls": str(tls_dir(stamp)) if stamp.tls else None}
    if stamp.tls and stamp.config.security.front_end_cert:
        found[PUBLIC_CA] = stamp.config.security.front_end_ca
    return found


def public_flags(stamp: LocalStamp) -> list[str]:
    """A front end's public certificate, when the config names one (else its stamp one)."""
    security = stamp.config.security
    if not (stamp.tls and security.front_end_cert):
        return []
    return ["--public-cert", security.front_end_cert, "--public-key", security.front_end_key]


def ca_file(stamp: LocalStamp) -> str | None:
    """The CA file a client of the front ends trusts (None: no TLS, or the public
    certificate is from a CA the system trusts)."""
    if not stamp.tls:
        return None
    if stamp.config.security.front_end_cert:
        return stamp.config.security.front_end_ca or None
    return str(tls.cert_path(tls_dir(stamp), tls.CA))
