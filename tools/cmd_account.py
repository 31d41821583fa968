"""`stamp account create | keys | rotate | ls | delete | sas`: accounts, their two keys and
shared access tokens (issue 16), kept in the lock service's replicated KV
(frontend/accounts.py).

`create` prints a second line: the account's Azure connection string (its Blob endpoint at
the stamp's first front end, frontend/blob_server.py) for Azure's own SDKs.

`delete` revokes the keys and retires the name for ever (a tombstone: frontend/accounts.py),
then removes the account's data through the partition layer (tools/account_purge.py) and
prints what it removed; run again, it finishes a purge cut short.

Endpoints of printed connection strings: a connection string names the stamp's front ends.
Until the front end process exists (issue 16, later), a stamp has none, so — temporarily —
the endpoints are the partition managers' addresses, and a note on stderr says so; once
`front-end` processes are in the stamp file they are used instead, with no note.
`--endpoint HOST:PORT` (repeatable) overrides both.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from common.errors import InvalidArgument, NotFound, StampError
from tools import cli_checks, sdk_client
from tools.cli_checks import checked

if TYPE_CHECKING:
    from frontend.accounts import Tombstone
    from tools.account_purge import Removed

ENDPOINT_KINDS = ("front-end", "partition-manager")  # the first the stamp has is used
DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _account_name(text: str) -> str:
    from frontend import names

    return names.check_account(text)


def _permissions(text: str) -> frozenset[str]:
    from frontend import sas

    return sas.parse_permissions(text)


def _endpoint(text: str) -> str:
    from stampsdk import connection_string
    from stampsdk import errors as sdk_errors

    try:
        connection_string.parse_endpoint(text)
    except sdk_errors.InvalidArgument as exc:
        raise InvalidArgument(str(exc)) from None
    return text


def parse_duration(text: str) -> int:
    """'90s', '30m', '1h', '7d' -> whole seconds (at least 1)."""
    number, unit = text[:-1], text[-1:]
    if unit not in DURATION_UNITS_S or not (number.isascii() and number.isdigit()) \
            or len(number) > 9 or int(number) == 0:
        raise InvalidArgument(f"a duration is a whole number followed by one of "
                              f"{', '.join(DURATION_UNITS_S)} (e.g. 1h, 30m), not {text!r}")
    return int(number) * DURATION_UNITS_S[unit]


def default_endpoints(processes: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], str]:
    """The endpoints a connection string names for a stamp whose stamp.json has `processes`,
    and a note for the user ("" when they are the front ends)."""
    for kind in ENDPOINT_KINDS:
        found = [p["address"] for _, p in sorted(processes.items()) if p["kind"] == kind]
        if found:
            note = "" if kind == "front-end" else (
                f"note: this stamp has no front ends yet; the endpoints are its "
                f"{kind.replace('-', ' ')}s' "
                f"addresses for now (temporary, until issue 16's front end exists)")
            return found, note
    raise NotFound(f"the stamp has no {' or '.join(ENDPOINT_KINDS)} processes to name as "
                   f"endpoints; pass --endpoint HOST:PORT")


def register(commands: Any) -> None:
    account = commands.add_parser("account", help="accounts, keys and shared access tokens")
    sub = account.add_subparsers(dest="account_command", metavar="ACTION", required=True)
    name_type = checked(_account_name, "an account name")

    def endpoint_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--endpoint", action="append", type=checked(_endpoint, "HOST:PORT"),
                            help="an endpoint for the connection string (repeatable; default: "
                                 "the stamp's front ends, for now its partition managers)")

    create = sub.add_parser("create", help="create an account; print its connection string")
    create.add_argument("name", type=name_type)
    endpoint_option(create)
    create.set_defaults(handler=cmd_create)

    keys = sub.add_parser("keys", help="print an account's two keys (base64)")
    keys.add_argument("name", type=name_type)
    keys.set_defaults(handler=cmd_keys)

    rotate = sub.add_parser("rotate", help="replace one key; print the new connection string")
    rotate.add_argument("name", type=name_type)
    rotate.add_argument("--key", type=int, choices=(1, 2), required=True,
                        help="which key to replace (the other keeps working)")
    endpoint_option(rotate)
    rotate.set_defaults(handler=cmd_rotate)

    ls = sub.add_parser("ls", help="list the accounts")
    ls.set_defaults(handler=cmd_ls)

    delete = sub.add_parser(
        "delete", help="delete an account: revoke its keys, remove its data (logs, "
                       "entities, blob containers) and retire its name for ever; run it "
                       "again to finish a delete cut short")
    delete.add_argument("name", type=name_type)
    delete.add_argument("--no-purge", action="store_true",
                        help="only revoke the keys and retire the name now; a later "
                             "'stamp account delete NAME' removes the data")
    delete.set_defaults(handler=cmd_delete)

    token = sub.add_parser("sas", help="print a shared access token")
    token.add_argument("name", type=name_type)
    token.add_argument("--permissions", required=True,
                       type=checked(_permissions, "a permission list"),
                       help="comma-separated: read,append,trim,seal,write,scan")
    token.add_argument("--prefix", default="", type=sdk_client.name_prefix,
                       help="the token covers every name starting with this, as a plain "
                            "string: 'logs' covers 'logs', 'logs-secret' and 'logsx'; end it "
                            "with '-' ('logs-') to cover only names under it (default: every "
                            "name)")
    token.add_argument("--expiry", required=True, type=checked(parse_duration, "a duration"),
                       help="how long the token is valid: 90s, 30m, 1h, 7d")
    token.add_argument("--key", type=int, choices=(1, 2), default=1,
                       help="which key signs it (rotating that key revokes it; default 1)")
    token.set_defaults(handler=cmd_sas)


@contextlib.contextmanager
def _store(args: argparse.Namespace) -> Iterator[Any]:
    """The account store of the stamp in --data-dir, its lock client closed afterwards."""
    from common.clock import SystemClock
    from frontend.accounts import AccountStore
    from lock_service.client import LockClient

    cli_checks.require_running(args.data_dir, "lock")
    with LockClient.from_stamp(args.data_dir, holder="stamp-cli") as lock_client:
        yield AccountStore(lock_client, SystemClock())


def _endpoints(args: argparse.Namespace) -> tuple[list[str], str]:
    """--endpoint, or the stamp's default endpoints and their note: found before anything
    changes, so a stamp without endpoints does not leave a new key unprinted."""
    from common.stamp_file import read_stamp

    if args.endpoint:
        return list(args.endpoint), ""
    return default_endpoints(read_stamp(args.data_dir)["processes"])


def _print_connection_string(endpoints: tuple[list[str], str], name: str, key: bytes,
                             data_dir: str) -> None:
    """The connection string on stdout (TLS as the stamp's front ends serve it: `CaFile=`
    its CA); the endpoints' note (if any) on stderr, only after success, so an error stays
    one line."""
    from stampsdk import connection_string

    addresses, note = endpoints
    use_tls, ca_file = _transport(data_dir)
    if note:
        print(note, file=sys.stderr)
    print(connection_string.make(addresses, name, key=key, tls=use_tls,
                                 ca_file=ca_file).format())


def _transport(data_dir: str) -> tuple[bool, str | None]:
    """Whether the stamp in `data_dir` serves TLS, and the CA file its clients trust."""
    from tools import local_tls
    from tools.local_stamp import LocalStamp

    try:
        stamp = LocalStamp.load(data_dir)
    except (NotFound, OSError, KeyError, ValueError):
        return False, None
    return stamp.tls, local_tls.ca_file(stamp)


def azure_connection_string(data_dir: str, name: str, key: bytes) -> str | None:
    """The connection string of Azure's SDKs for account `name` at the stamp's first front
    end with an Azure Blob endpoint (None: none has one)."""
    from tools.local_front_ends import azure_connection_string as at_front_end
    from tools.local_stamp import LocalStamp

    try:
        stamp = LocalStamp.load(data_dir)
    except (NotFound, OSError, KeyError, ValueError):
        return None
    for rec in stamp.front_ends():
        text = at_front_end(rec, name, key)
        if text is not None:
            return text
    return None


def cmd_create(args: argparse.Namespace) -> int:
    """Two lines: the Stamp SDK's connection string, then Azure's (its Blob endpoint at a
    front end), when the stamp has one."""
    endpoints = _endpoints(args)
    with _store(args) as store:
        account = store.create(args.name)
    _print_connection_string(endpoints, args.name, account.keys[0], args.data_dir)
    azure = azure_connection_string(args.data_dir, args.name, account.keys[0])
    if azure is not None:
        print(azure)
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    with _store(args) as store:
        account = store.get(args.name)
    for number, key in enumerate(account.keys, start=1):
        print(f"key{number} {base64.b64encode(key).decode()}")
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    endpoints = _endpoints(args)
    with _store(args) as store:
        account = store.rotate(args.name, args.key)
    _print_connection_string(endpoints, args.name, account.keys[args.key - 1], args.data_dir)
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    with _store(args) as store:
        for name in store.list():
            print(name)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    """Tombstone the account (keys revoked, name retired), then purge its data and record
    that on the tombstone (tools/account_purge.py). A deleted account's name resumes the
    purge: each step is idempotent."""
    if not args.no_purge:  # refused before anything changes: the purge needs them
        cli_checks.require_running(args.data_dir, "partition-server")
    with _store(args) as store:
        tombstone = store.delete(args.name)
    if args.no_purge:
        print(f"deleted account {args.name}: its keys no longer work and its name is "
              f"retired; its data is not removed yet (run 'stamp account delete "
              f"{args.name}' to remove it)")
        return 0
    try:
        removed = _purge(args.data_dir, tombstone)
    except StampError as exc:
        raise type(exc)(f"account {args.name} is deleted (its keys no longer work) but its "
                        f"data is not all removed: {exc}; run 'stamp account delete "
                        f"{args.name}' again to finish") from None
    with _store(args) as store:
        store.mark_purged(args.name)
    print(f"deleted account {args.name}: {removed.summary()}; the name is retired")
    return 0


def _purge(data_dir: str, tombstone: Tombstone) -> Removed:
    """Wait until no front end takes the account's requests, then purge its data."""
    import time

    from common.config import load_config
    from common.stamp_file import read_stamp
    from partition_layer.client import PartitionClient
    from tools import account_purge
    from tools.progress import Progress

    config = load_config(read_stamp(data_dir).get("config"))
    with Progress("account delete") as progress:
        wait_s = account_purge.remaining_settle_s(tombstone, config, time.time())
        if wait_s > 0:
            progress.phase(f"waiting {wait_s:.0f} s: no front end takes the account's "
                           f"requests by then")
            time.sleep(wait_s)  # a fixed time to let pass, not a condition to poll
        with PartitionClient.from_stamp(data_dir) as client:
            return client.run(account_purge.purge(client.aio, tombstone.name, progress))


def cmd_sas(args: argparse.Namespace) -> int:
    import time

    from frontend import sas

    with _store(args) as store:
        account = store.get(args.name)
    now_s = time.time()
    # An expiry beyond sas.EXPIRY_MAX_S is mint's InvalidArgument: one line (tools/cli.py).
    print(sas.mint(args.name, args.key, account.keys[args.key - 1], args.permissions,
                   args.prefix, int(now_s) + args.expiry, now_s=now_s))
    # What the prefix covers, on stderr after success: stdout stays the token alone.
    print(f"note: {sas.prefix_note(args.prefix)}", file=sys.stderr)
    return 0
