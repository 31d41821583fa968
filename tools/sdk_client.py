"""How a `stamp` command reaches a stamp through its front ends (issue 16): the connection
string it uses, the SDK client (stampsdk.Client) it makes of it, and the argparse types of
what the front end names (logs, partition names, rows).

Where the connection string comes from, the first that is there wins:
1. `--connection-string TEXT` on the command line;
2. `$STAMP_CONNECTION_STRING`, when set and not empty (an empty one counts as unset, so
   `STAMP_CONNECTION_STRING= stamp ...` falls back to the admin account);
3. the admin account's, `DATA_DIR/admin-connection-string` (DATA_DIR is `--data-dir`), which
   `stamp up` writes. Only this source needs a local stamp: it must exist and run.

Contract: a missing or malformed connection string is a StampError that names its source and
what is wrong, raised before anything is sent (one line, tools/cli.py). An error the stamp
answers with leaves `client()` with its kind in front ("PermissionDenied: ..."), so the one
line says what kind of refusal it was; a connection string is never printed (it holds a key).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.errors import InvalidArgument, NotFound, StampError
from tools import cli_checks
from tools.local_stamp import ADMIN_CONNECTION_STRING_FILE, KIND_FRONT_END

if TYPE_CHECKING:
    from stampsdk import Client
    from stampsdk.connection_string import ConnectionString

ENV_VAR = "STAMP_CONNECTION_STRING"
ADMIN_FILE = ADMIN_CONNECTION_STRING_FILE
TIMEOUT_S_DEFAULT = 30.0
TIMEOUT_S_MAX = 3600.0
SOURCES = (f"The connection string is --connection-string, else ${ENV_VAR}, else the admin "
           f"account's that 'stamp up' wrote to DATA_DIR/{ADMIN_FILE}.")
ROW_BYTES_MAX = 1024  # the partition layer's default row_bytes_max; the stamp checks its own


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options every command that goes through a front end takes."""
    parser.add_argument("--connection-string", metavar="TEXT",
                        help=f"Endpoint=...;Account=...;Key=... (or SharedAccessSignature=...)"
                             f" (default: ${ENV_VAR}, else the admin account's, written by "
                             f"'stamp up' to DATA_DIR/{ADMIN_FILE})")
    parser.add_argument("--timeout", type=timeout_seconds, default=TIMEOUT_S_DEFAULT,
                        metavar="SECONDS",
                        help=f"give up on a call after this long, retries included (default "
                             f"{TIMEOUT_S_DEFAULT:g})")


def timeout_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a timeout is a number of seconds, not {text!r}"
                                         ) from None
    if not 0 < value <= TIMEOUT_S_MAX:  # also refuses nan
        raise argparse.ArgumentTypeError(f"a timeout is more than 0 and at most "
                                         f"{TIMEOUT_S_MAX:g} seconds, not {text}")
    return value


def _log(text: str) -> str:
    from frontend import names

    return names.check_log(text)


def _partition(text: str) -> str:
    from frontend import names

    return names.check_partition(text)


def _prefix(text: str) -> str:
    from frontend import names

    return names.check_prefix(text)


log_name = cli_checks.checked(_log, "a log name")
partition_name = cli_checks.checked(_partition, "a partition name")
name_prefix = cli_checks.checked(_prefix, "a name prefix")


def row_key(text: str) -> str:
    """A row key as typed: not empty, at most ROW_BYTES_MAX bytes of UTF-8."""
    if not text:
        raise argparse.ArgumentTypeError("a row key is not empty")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"a row key is valid UTF-8: {text!r}") from None
    if size > ROW_BYTES_MAX:
        raise argparse.ArgumentTypeError(f"a row key has at most {ROW_BYTES_MAX} bytes, not "
                                         f"{size}")
    return text


def scan_bound(text: str) -> str | tuple[str, str]:
    """`PNAME` (from that name's first row) or `PNAME/ROW` (the row is everything after the
    first '/': partition names have none)."""
    pname, sep, row = text.partition("/")
    pname = partition_name(pname)
    return (pname, row_key(row)) if sep and row else pname


def find_connection_string(args: argparse.Namespace) -> ConnectionString:
    """The connection string this command uses (the module's order), parsed and checked;
    an error about it names where it came from."""
    from stampsdk import connection_string
    from stampsdk import errors as sdk_errors

    if args.connection_string is not None:
        source, text = "--connection-string", args.connection_string
    elif os.environ.get(ENV_VAR):
        source, text = f"${ENV_VAR}", os.environ[ENV_VAR]
    else:
        path = Path(args.data_dir).resolve() / ADMIN_FILE
        # A stamp that is gone or stopped says so, rather than "no such file" or a client
        # retrying dead endpoints until its timeout.
        cli_checks.require_running(args.data_dir, KIND_FRONT_END)
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise NotFound(f"no connection string: none given with --connection-string or "
                           f"${ENV_VAR}, and {path} does not exist ('stamp up' writes it)"
                           ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgument(f"cannot read the admin connection string {path}: {exc}"
                                  ) from None
        source = str(path)
    try:
        return connection_string.parse(text)
    except sdk_errors.InvalidArgument as exc:
        raise InvalidArgument(f"the connection string from {source} is not valid: {exc}"
                              ) from None


@contextlib.contextmanager
def client(args: argparse.Namespace) -> Iterator[Client]:
    """An SDK client for this command's connection string, closed afterwards; the stamp's
    errors leave it named by their kind."""
    cs = find_connection_string(args)
    from stampsdk import Client

    use_tls, ca_file = transport(args.data_dir, cs)
    with named_errors(), Client(list(cs.endpoints), cs.account, key=cs.key, sas=cs.sas,
                                timeout_s=args.timeout, tls=use_tls,
                                ca_file=ca_file) as sdk:
        yield sdk


def transport(data_dir: str, cs: ConnectionString) -> tuple[bool, str | None]:
    """(TLS, CA file) for `cs`: as it says, except that an operator's tool trusts the CA of
    the stamp of its data directory (if any) for that stamp's front ends, so TLS holds even
    for a connection string without CaFile that names them (common/stamp_file.py)."""
    from common import tls
    from common.stamp_file import read_stamp

    if cs.tls:
        return cs.tls, cs.ca_file
    with contextlib.suppress(StampError):
        read_stamp(data_dir)  # this process then knows which addresses speak TLS
    if any(tls.identity_for(endpoint) is not None for endpoint in cs.endpoints):
        return True, str(tls.cert_path(tls.dir_in(data_dir), tls.CA))
    return False, None


@contextlib.contextmanager
def named_errors() -> Iterator[None]:
    """Re-raise a StampError (the stamp's, or the SDK's) as the same kind with its kind's name
    in front of its message."""
    from stampsdk import errors as sdk_errors  # here: the CLI's other commands never load it

    try:
        yield
    except (StampError, sdk_errors.StampError) as exc:
        kind = type(exc).__name__
        if str(exc).startswith(f"{kind}:"):
            raise
        named = copy.copy(exc)
        named.args = (f"{kind}: {exc}" if str(exc) else kind,)
        raise named from exc


def show_bytes(data: bytes) -> str:
    """Bytes for a human's terminal, on one line: UTF-8 text, other bytes as \\xNN and
    control characters (line breaks, tabs) as \\n, \\t, \\xNN escapes. For reading only:
    `--json` is the exact form."""
    text = data.decode("utf-8", errors="backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                   for c in text)


def json_bytes(field: str, data: bytes) -> dict[str, Any]:
    """`{field: text}` when `data` is UTF-8, else `{field + "_base64": base64}`: the JSON
    form of every row and value the CLI prints (exactly one of the two keys is present)."""
    import base64

    try:
        return {field: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{field}_base64": base64.b64encode(data).decode()}
