"""`stamp lock ls | get | put`: the lock service's leases and small metadata."""

from __future__ import annotations

import argparse
import json
from typing import Any

from common.errors import NotFound
from tools import cli_checks


def register(commands: Any) -> None:
    lock = commands.add_parser("lock", help="leases, holders and metadata in the lock service")
    sub = lock.add_subparsers(dest="lock_command", metavar="ACTION", required=True)

    ls = sub.add_parser("ls", help="every lock and session: holder, fencing token, expiry")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(handler=cmd_ls)

    get = sub.add_parser("get", help="print a metadata key's value and version")
    get.add_argument("key", type=cli_checks.name)
    get.set_defaults(handler=cmd_get)

    keys = sub.add_parser("keys", help="list metadata keys under a prefix")
    keys.add_argument("prefix", nargs="?", default="")
    keys.set_defaults(handler=cmd_keys)


def _client(args: argparse.Namespace) -> Any:
    from lock_service.client import LockClient

    cli_checks.require_running(args.data_dir, "lock")
    return LockClient.from_stamp(args.data_dir, holder="stamp-cli")


def cmd_ls(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        leases = client.list_leases()
    finally:
        client.close()
    rows = [{"token": lease.token, "kind": "lock" if lease.lock else "session",
             "lock": lease.lock, "holder": lease.holder, "ttl_s": round(lease.ttl_s, 3),
             "expires_in_s": round(lease.expires_in_s, 3), "keys": lease.keys}
            for lease in leases]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no locks or sessions are held")
        return 0
    from tools import tables

    tables.print_table(["TOKEN", "KIND", "LOCK", "HOLDER", "TTL S", "EXPIRES IN S", "KEYS"],
                       ([r["token"], r["kind"], r["lock"] or None, r["holder"], r["ttl_s"],
                         r["expires_in_s"], r["keys"]] for r in rows),
                       right=["TOKEN", "TTL S", "EXPIRES IN S", "KEYS"])
    return 0


def cmd_get(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        found = client.get(args.key)
    finally:
        client.close()
    if found is None:
        raise NotFound(f"no key {args.key!r}")
    value, version = found
    print(f"version {version}: {value.decode(errors='replace')}")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    client = _client(args)
    try:
        for key in client.list(args.prefix):
            print(key)
    finally:
        client.close()
    return 0
