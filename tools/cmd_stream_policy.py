"""`stamp stream policy NAME --ec K+M --after DURATION` (or `--clear`) and `stamp stream
policies`: what the ec job (`stamp job ec`) does with the sealed extents of a stream, kept
in the stream manager. NAME is a stream's name or an fnmatch pattern (`p-*.rows`); the
longest matching pattern applies to a stream no policy names exactly."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import Any

from tools import cli_checks

DURATION_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
AFTER_S_MAX = 10 * 365 * 86400


def ec_code(text: str) -> tuple[int, int]:
    """'6+3' -> (6, 3)."""
    match = re.fullmatch(r"\s*(\d+)\s*\+\s*(\d+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"--ec is K+M, e.g. 6+3, not {text!r}")
    k, m = int(match[1]), int(match[2])
    if k < 1 or m < 1 or k + m > 255:
        raise argparse.ArgumentTypeError(f"--ec {text}: K and M at least 1, K+M at most 255")
    return k, m


def duration_s(text: str) -> float:
    """'90s', '10m', '2h', '1d' or plain seconds -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"a duration is a number with s, m, h or d, e.g. "
                                         f"10m, not {text!r}")
    seconds = float(match[1]) * DURATION_UNITS_S[match[2] or "s"]
    if seconds > AFTER_S_MAX:
        raise argparse.ArgumentTypeError(f"{text} is longer than ten years")
    return seconds


def register(sub: Any) -> None:
    policy = sub.add_parser("policy", help="set what 'stamp job ec' does with a stream's "
                                           "sealed extents (or --clear it)")
    policy.add_argument("name", type=cli_checks.name,
                        help="a stream name, or an fnmatch pattern such as 'p-*.rows'")
    what = policy.add_mutually_exclusive_group(required=True)
    what.add_argument("--ec", type=ec_code, metavar="K+M",
                      help="erasure-code sealed extents as RS(K, M), e.g. 6+3")
    what.add_argument("--clear", action="store_true", help="remove the policy")
    policy.add_argument("--after", type=duration_s, default=0.0, metavar="DURATION",
                        help="only extents sealed at least this long ago (e.g. 10m; "
                             "default 0)")
    policy.set_defaults(handler=cmd_policy)
    policies = sub.add_parser("policies", help="list the stream policies")
    policies.add_argument("--json", action="store_true", help="print JSON")
    policies.set_defaults(handler=cmd_policies)


async def _with_sm(data_dir: str, work: Any) -> Any:
    from common.config import load_config
    from common.stamp_file import addresses_of, read_stamp
    from stream_layer.sm_client import AsyncStreamManagerClient

    config = load_config(read_stamp(data_dir).get("config"))
    sm = AsyncStreamManagerClient(addresses_of(data_dir, "stream-manager"),
                                  config.stream_manager)
    try:
        return await work(sm)
    finally:
        await sm.close()


def cmd_policy(args: argparse.Namespace) -> int:
    cli_checks.require_running(args.data_dir, "stream-manager")
    k, m = (0, 0) if args.clear else args.ec
    asyncio.run(_with_sm(args.data_dir,
                         lambda sm: sm.set_stream_policy(args.name, k, m, args.after)))
    if args.clear:
        print(f"policy of {args.name} removed")
    else:
        print(f"streams {args.name}: sealed extents erasure-coded as RS({k},{m}) "
              f"{args.after:g} s after their seal, by 'stamp job ec'")
    return 0


def cmd_policies(args: argparse.Namespace) -> int:
    cli_checks.require_running(args.data_dir, "stream-manager")
    found = asyncio.run(_with_sm(args.data_dir, lambda sm: sm.list_stream_policies()))
    rows = [{"pattern": p.pattern, "ec_k": p.ec_k, "ec_m": p.ec_m, "after_s": p.after_s}
            for p in found]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from tools import tables

    tables.print_table(["STREAMS", "CODE", "AFTER"],
                       ([r["pattern"], f"RS({r['ec_k']},{r['ec_m']})", f"{r['after_s']:g} s"]
                        for r in rows), right=["AFTER"])
    return 0
