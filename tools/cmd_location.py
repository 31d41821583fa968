"""`stamp location up | down | status | create-account | geo | failover | bootstrap | migrate |
tail` (issue 30): a
location of two stamps on this machine (tools/local_location.py), accounts placed in it by
load across regions (location/placement.py), their replication and planned failovers
(tools/geo_account.py).

`create-account NAME` places the account (its primary stamp by load, its secondary in the
other region), creates it on the primary (two fresh keys) and has the secondary hold the same
keys; run again after a crash, it finishes what is missing and changes nothing that is done.
It returns once the primary's partitions holding the account's keys ship to the secondary.
It prints the placement, then the account's connection string, which names the location's
servers (`Location=...`): the SDK asks them where the account's primary is (issue 30)."""

from __future__ import annotations

import argparse
from typing import Any

from tools.cli_checks import checked

DEFAULT_LOCATION_DIR = "location-data"
SHIPPING_WAIT_S = 60.0


def register(commands: Any) -> None:
    location = commands.add_parser(
        "location", help="a location of two stamps in two regions on this machine (issue 30)")
    location.add_argument("--dir", default=DEFAULT_LOCATION_DIR,
                          help=f"the location's directory (default: ./{DEFAULT_LOCATION_DIR})")
    actions = location.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = actions.add_parser("up", help="start the location service and its two stamps "
                                       "(west-1 on 127.0.0.2, east-1 on 127.0.0.3)")
    up.add_argument("--stamps", type=int, choices=(2, 3), default=2,
                    help="how many stamps: 2, or 3 for a stamp to migrate accounts to "
                         "(west-2 on 127.0.0.4); a stamp made once stays (default: 2)")
    up.add_argument("--capacity-mb", type=int, metavar="MB",
                    help="each stamp's capacity as the location counts its use against the "
                         "watermark (kept; default: its disk's size)")
    up.add_argument("--balance-interval-s", type=float, default=30.0, metavar="S",
                    help="how often the location server moves accounts off stamps past "
                         "the watermark (set when the location is made; default 30)")
    up.set_defaults(handler=cmd_up)
    down = actions.add_parser("down", help="stop both stamps and the location service")
    down.set_defaults(handler=cmd_down)
    status = actions.add_parser("status", help="the stamps and how many accounts each is "
                                               "primary and secondary for")
    status.set_defaults(handler=cmd_status)
    create = actions.add_parser("create-account",
                                help="place a new account (primary by load, secondary in "
                                     "the other region) and create it on both stamps")
    _name_argument(create)
    create.set_defaults(handler=cmd_create_account)
    geo = actions.add_parser("geo", help="an account's placement and replication: what is "
                                         "not yet on its secondary, its last sync time")
    _name_argument(geo)
    geo.set_defaults(handler=cmd_geo)
    failover = actions.add_parser(
        "failover", help="make an account's secondary its primary",
        description="--planned: the primary stops taking the account's writes, everything "
                    "it acknowledged is shipped, then the roles swap: nothing is lost, the "
                    "account stays geo-replicated the other way round, and SDK writers see a "
                    "pause, not an error. Without --planned (the primary stamp is gone): the "
                    "secondary becomes the primary at once; the writes the primary "
                    "acknowledged after the account's last sync time may be lost, and the "
                    "command says how many seconds of writes that is and asks before it acts "
                    "(--yes: do not ask). The old primary, when it comes back, is the "
                    "account's secondary, marked unavailable.")
    _name_argument(failover)
    failover.add_argument("--planned", action="store_true",
                          help="both stamps are up: swap the roles with nothing lost")
    failover.add_argument("--yes", action="store_true",
                          help="an unplanned failover: do not ask before acting")
    failover.set_defaults(handler=cmd_failover)
    boot = actions.add_parser(
        "bootstrap", help="make an account's secondary a fresh copy of its primary, then live",
        description="An unplanned failover leaves the old primary the account's secondary, "
                    "unavailable: its copy may hold writes the new primary never saw, so "
                    "nothing is replicated to it and no failover goes to it. This clears the "
                    "account's copy at the secondary, copies the primary's (each partition "
                    "a consistent snapshot, then its shipping goes on from where it stood), "
                    "waits until every write the primary acknowledged is there, and marks "
                    "the secondary live. Read the old primary's tail ('stamp location tail') "
                    "first: the clear removes those writes from its copy. Safe to run again "
                    "if cut short.")
    _name_argument(boot)
    boot.set_defaults(handler=cmd_bootstrap)
    balance = actions.add_parser(
        "balance", help="move accounts off stamps past the capacity watermark, once",
        description="What the location server does on its own every interval: each stamp "
                    "at least --watermark-percent used sheds the largest accounts it is the "
                    "primary of, each migrated to the least used stamp of its region that "
                    "stays under the watermark ('stamp location migrate').")
    balance.add_argument("--watermark-percent", type=_percent, default=70, metavar="P",
                         help="a stamp this much used sheds accounts: 1 to 100 (default 70)")
    balance.add_argument("--moves", type=_moves, default=1,
                         help="migrations at most this round: 1 to 100 (default 1)")
    balance.set_defaults(handler=cmd_balance)
    migrate = actions.add_parser(
        "migrate", help="move an account's primary to another stamp of the location",
        description="The stamp given becomes the account's secondary and is bootstrapped "
                    "(a copy of the account's rows, then its replication), then a planned "
                    "failover makes it the primary: writers see a pause, not an error, and "
                    "nothing acknowledged is lost. The account's secondary is then a stamp "
                    "of another region (bootstrapped anew if it must change), and any other "
                    "stamp drops its copy. Safe to run again if cut short.")
    _name_argument(migrate)
    migrate.add_argument("--to", required=True, metavar="STAMP",
                         help="the stamp to move its primary to (see 'stamp location status')")
    migrate.set_defaults(handler=cmd_migrate)
    tail = actions.add_parser(
        "tail", help="the writes an unplanned failover set aside at the old primary",
        description="When an unplanned failover deposed a stamp, the writes it had "
                    "acknowledged and never shipped to the new primary are kept aside there, "
                    "never merged: this lists them by stamp, with the file holding every "
                    "row (JSON lines, each a serialized partition request in base64).")
    _name_argument(tail)
    tail.set_defaults(handler=cmd_tail)


def _whole(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{low} to {high}, not {value}")
        return value
    return parse


_percent = _whole(1, 100)
_moves = _whole(1, 100)


def _name_argument(action: Any) -> None:
    action.add_argument("name", type=checked(_account_name, "an account name"),
                        help="the account's name")


def _account_name(text: str) -> str:
    from frontend import names

    return names.check_account(text)


def _location(args: argparse.Namespace) -> Any:
    from tools.local_location import LocalLocation

    return LocalLocation(args.dir)


def _running_service(args: argparse.Namespace) -> Any:
    from common.errors import Unavailable

    location = _location(args)
    service = location.service()
    if not service.stamp_file.exists() or not all(
            service.alive(r.name) for r in service.lock_servers()):
        raise Unavailable(f"the location in {location.directory} is not running: "
                          f"'stamp location --dir {args.dir} up' starts it")
    return location


def cmd_up(args: argparse.Namespace) -> int:
    from tools.local_location import LocalLocation
    from tools.progress import Progress

    location = LocalLocation(args.dir, balance_interval_s=args.balance_interval_s)
    capacity = None if args.capacity_mb is None else args.capacity_mb * 1024 * 1024
    with Progress("location up") as progress:
        started = location.up(progress=progress, stamps=args.stamps, capacity_bytes=capacity)
    print(f"location up in {location.directory}: started {len(started)} processes")
    print(f"  location servers: {', '.join(location.location_endpoints())}")
    for site, stamp in location.stamps():
        fronts = ", ".join(r.address for r in stamp.front_ends())
        print(f"  {site.name} ({site.region}): {stamp.data_dir}, front ends {fronts}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    from tools.progress import Progress

    with Progress("location down") as progress:
        stopped = _location(args).down(progress=progress)
    print(f"stopped {len(stopped)} processes" if stopped else "nothing was running")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from collections import Counter

    location = _running_service(args)
    with location.store_client() as store:
        stamps = store.stamps()
        placements = store.placements()
    primary = Counter(p.primary for p in placements)
    secondary = Counter(p.secondary for p in placements)
    print(f"location servers: {', '.join(location.location_endpoints()) or 'none yet'}")
    print(f"{'stamp':10} {'region':8} {'primary':>8} {'secondary':>10} {'used':>12}  front ends")
    for name, info in sorted(stamps.items()):
        print(f"{name:10} {info.region:8} {primary[name]:8d} {secondary[name]:10d} "
              f"{info.used_bytes:12,d}  {', '.join(info.front_ends)}")
    return 0


def cmd_create_account(args: argparse.Namespace) -> int:
    from stampsdk import connection_string

    location = _running_service(args)
    placement, account = create_account(location, args.name)
    print(f"account {args.name}: primary {placement.primary}, secondary "
          f"{placement.secondary} ({placement.secondary_state})")
    print(connection_string.make([], args.name, key=account.keys[0],
                                 location=location.location_endpoints()).format())
    return 0


def cmd_geo(args: argparse.Namespace) -> int:
    import time

    from tools import geo_account

    for line in geo_account.status(_running_service(args), args.name).lines(time.time()):
        print(line)
    return 0


def cmd_failover(args: argparse.Namespace) -> int:
    from tools.progress import Progress

    location = _running_service(args)
    if not args.planned:
        return _unplanned_failover(location, args)
    from tools import geo_account
    from tools.geo_bootstrap import operation

    with operation(location, args.name), Progress("failover") as progress:
        report = geo_account.planned_failover(location, args.name, progress)
    print(f"account {args.name}: primary {report.new_primary} (was {report.old_primary}), "
          f"epoch {report.epoch}; {report.total_s:.1f} s (front-end caches "
          f"{report.fenced_wait_s:.1f} s, drain {report.drain_s:.1f} s)")
    return 0


def _unplanned_failover(location: Any, args: argparse.Namespace) -> int:
    import sys
    import time

    from common.errors import InvalidArgument
    from tools import geo_account
    from tools.progress import Progress

    risk = geo_account.unplanned_risk(location, args.name)
    for line in risk.lines(time.time()):
        print(line)
    if not args.yes:
        if not sys.stdin.isatty():
            raise InvalidArgument("an unplanned failover asks before it acts: run it at a "
                                  "terminal, or add --yes")
        p = risk.placement
        answer = input(f"make {p.secondary} the primary of {p.account} now? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing changed")
            return 1
    with Progress("failover") as progress:
        report = geo_account.unplanned_failover(location, args.name, risk, progress)
    print(f"account {args.name}: primary {report.new_primary} (was {report.old_primary}, "
          f"{report.fenced}), epoch {report.epoch}, in {report.total_s:.1f} s; "
          f"{report.old_primary} is its secondary, unavailable")
    return 0


def cmd_bootstrap(args: argparse.Namespace) -> int:
    from tools.geo_bootstrap import bootstrap
    from tools.progress import Progress

    location = _running_service(args)
    with Progress("bootstrap") as progress:
        report = bootstrap(location, args.name, progress)
    print(f"account {args.name}: {report.secondary} is a live secondary of {report.primary} "
          f"in {report.seconds:.1f} s ({report.names_cleared} names cleared there, "
          f"{report.rows:,} rows / {report.nbytes:,} bytes copied by {report.partitions} "
          "partitions)")
    return 0


def cmd_balance(args: argparse.Namespace) -> int:
    from tools.geo_balance import balance_once
    from tools.progress import Progress

    location = _running_service(args)
    with Progress("balance") as progress:
        plan, made = balance_once(location, args.watermark_percent, args.moves, progress)
    if not plan.over:
        print(f"no stamp is {args.watermark_percent}% used or more: nothing to move")
    for report in made:
        print(f"moved {report.account} from {report.old_primary} to {report.primary} "
              f"in {report.seconds:.1f} s")
    for move in plan.moves[len(made):]:
        print(f"left for the next round: {move.account} from {move.source} to {move.to}")
    if plan.stuck:
        print(f"over the watermark with nowhere to go: {', '.join(plan.stuck)}")
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from tools.geo_migrate import migrate
    from tools.progress import Progress

    location = _running_service(args)
    with Progress("migrate") as progress:
        report = migrate(location, args.name, args.to, progress)
    if len(report.steps) == 0:
        print(f"account {args.name}: primary {report.primary} already, secondary "
              f"{report.secondary}; nothing to do")
        return 0
    print(f"account {args.name}: primary {report.primary} (was {report.old_primary}), "
          f"secondary {report.secondary}, in {report.seconds:.1f} s "
          f"({report.copied_bytes:,} bytes copied; failover {report.failover_s:.1f} s)")
    for step in report.steps:
        print(f"  {step}")
    for stamp in report.dropped:
        print(f"  {stamp} dropped its copy")
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    from tools import geo_account

    found = geo_account.tails(_location(args), args.name)
    for tail in found:
        print(tail.summary())
    if not found:
        print(f"no stamp of the location set writes of {args.name} aside")
    return 0


def create_account(location: Any, name: str) -> tuple[Any, Any]:
    """Place `name` (or find its placement: a retried create), create it on its primary
    stamp (or find it there) and have its secondary hold the same account. Returns
    (placement, account)."""
    from common.errors import AlreadyExists
    from tools.geo_account import accounts_at, stamps_of

    with location.store_client() as store:
        try:
            placement = store.create_account(name)
        except AlreadyExists:
            placement, _ = store.resolve(name)
    stamps = stamps_of(location)
    with accounts_at(stamps[placement.primary]) as primary:
        try:
            account = primary.create(name, primary_stamp=placement.primary,
                                     epoch=placement.epoch)
        except AlreadyExists:
            account = primary.get(name)
    with accounts_at(stamps[placement.secondary]) as secondary:
        secondary.adopt(account, primary=placement.primary, epoch=placement.epoch)
    _until_shipping(stamps[placement.primary], name)
    return placement, account


def _until_shipping(stamp: Any, account: str) -> None:
    """Until every partition of `stamp` holding `account`'s keys ships (they attach within
    geo_shipping.ATTACH_INTERVAL_S of the stamp joining the location). A shipper that
    attaches late starts from its partition's last checkpoint: a write taken before then
    and checkpointed would never reach the secondary, so the account is handed out only
    once shipping runs."""
    import asyncio
    import time

    from common.errors import StampError, Unavailable
    from tools.geo_account import shipping_of

    deadline = time.monotonic() + SHIPPING_WAIT_S
    while True:
        try:
            if asyncio.run(shipping_of(stamp, account)) is not None:
                return
        except StampError:
            pass  # a partition server restarting: asked again
        if time.monotonic() > deadline:
            raise Unavailable(f"{stamp.data_dir.name} does not ship account {account}'s "
                              f"partitions after {SHIPPING_WAIT_S:.0f} s: is it in the "
                              "location? (create-account again once it is)")
        time.sleep(0.1)
