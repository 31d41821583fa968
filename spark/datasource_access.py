"""Who the Stamp data source reads as (issue 18): a read-only shared access token, whatever
the user gave.

Options (case-insensitive, as Spark passes them):
- `connectionString`: `Endpoint=...;Account=...;Key=...` or `...;SharedAccessSignature=...`,
  or `Location=...` instead of `Endpoint` (issue 30: the account's stamps, as a location
  names them);
- or `sas` (a token), `endpoints` (HOST:PORT, comma-separated) and optionally `account`
  (default: the token's);
- `readFrom`: `primary` or `secondary` (read access to the secondary, issue 30: every read
  of the query, planning included, goes to the account's secondary stamp; stampsdk/aio.py
  says what that reads, and that it fails with SecondaryNotLive while the secondary is not
  live); with front ends named instead of a location, they are read as the secondary's
  (a secondary's front ends answer only reads so marked). Default: the connection string's
  `ReadFrom`, else primary.

Contract of `read_only_access`: with an account key it mints, on the driver, a token
granting only `read` and `scan` on every name of the account for TOKEN_LIFETIME_S, signed
with whichever of the two keys the connection string holds (tried against a front end); the
key itself never leaves the driver — Spark's tasks get the Access, which holds the token only.
A token the user gave is passed on as it is (it can grant no more than it does). Errors are
InvalidArgument naming the option, or what the front end raises (Unauthenticated...).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from stampsdk import Client, connection_string, sas
from stampsdk.connection_string import PRIMARY, READ_FROM
from stampsdk.errors import InvalidArgument, Unauthenticated

# A minted token outlives any batch read and a week of streaming; a query running longer
# is restarted with a fresh one.
TOKEN_LIFETIME_S = 7 * 24 * 3600
READ_PERMISSIONS = ("read", "scan")
# How long one SDK call of a task may take, retries across failovers included: a PS that is
# SIGKILLed is replaced within seconds, a task that gives up fails the whole query.
CALL_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Access:
    endpoints: tuple[str, ...]
    account: str
    sas: str
    tls: bool = False  # TLS to the front ends, trusting `ca_file` (the connection string's)
    ca_file: str | None = None
    location: tuple[str, ...] = ()  # a location's servers, instead of `endpoints`
    read_from: str = PRIMARY  # SECONDARY: the reads go to the account's secondary stamp

    def client(self) -> Client:
        """A new client of its own (the caller closes it)."""
        return Client(self.endpoints, self.account, sas=self.sas, timeout_s=CALL_TIMEOUT_S,
                      tls=self.tls, ca_file=self.ca_file, location=self.location,
                      read_from=self.read_from)

    def shared_client(self) -> Client:
        """This process's client for this Access, made once and kept open: Spark runs many
        tasks one after another in each Python worker (spark.python.worker.reuse), and
        making a client (its event loop, its connection to a front end) is most of what a
        small task costs. Keyed by process id too: a worker forked from a process that had
        one makes its own (threads and gRPC channels do not survive a fork). Thread-safe,
        as the client is; never closed (it ends with the worker)."""
        key = (os.getpid(), self)
        with _SHARED_LOCK:
            client = _SHARED.get(key)
            if client is None:
                client = _SHARED[key] = self.client()
            return client

    def __repr__(self) -> str:  # never print a secret into a log by accident
        return (f"Access(endpoints={self.endpoints!r}, location={self.location!r}, "
                f"account={self.account!r}, read_from={self.read_from!r}, <token>)")


_SHARED: dict[tuple[int, Access], Client] = {}
_SHARED_LOCK = threading.Lock()


def read_only_access(options: Mapping[str, str]) -> Access:
    """The credentials the read's tasks use (module contract)."""
    text = options.get("connectionString")
    if text:
        parsed = connection_string.parse(text)
        parsed = dataclasses.replace(parsed, read_from=read_from_option(
            options, parsed.read_from))
        if parsed.sas is not None:
            return Access(parsed.endpoints, parsed.account, parsed.sas, parsed.tls,
                          parsed.ca_file, parsed.location, parsed.read_from)
        assert parsed.key is not None
        return _mint(parsed, parsed.key)
    token = options.get("sas")
    endpoints = tuple(e.strip() for e in (options.get("endpoints") or "").split(",")
                      if e.strip())
    if not token or not endpoints:
        raise InvalidArgument("the stamp data source needs option connectionString, or sas "
                              "and endpoints")
    account = options.get("account") or sas.decode(token).account
    checked = connection_string.make(list(endpoints), account, sas_token=token,
                                     tls=options.get("tls") == "true",
                                     ca_file=options.get("caFile") or None,
                                     read_from=read_from_option(options, PRIMARY))
    return Access(checked.endpoints, checked.account, token, checked.tls, checked.ca_file,
                  read_from=checked.read_from)


def read_from_option(options: Mapping[str, str], default: str) -> str:
    """Option `readFrom` (module docstring), `default` (the connection string's) when it is
    not given; InvalidArgument naming the option for another value."""
    value = options.get("readFrom")
    if value is None or value == "":
        return default
    read_from = value.strip().lower()
    if read_from not in READ_FROM:
        raise InvalidArgument(f"option readFrom is {' or '.join(READ_FROM)}, not "
                              f"{value[:40]!r}")
    return read_from


def _mint(parsed: connection_string.ConnectionString, key: bytes) -> Access:
    """A read-only token signed by `key`: which of the account's two keys it is shows only
    when a front end checks the token, so each number is tried."""
    now = time.time()
    refused: Unauthenticated | None = None
    for key_index in sas.KEY_INDEXES:
        token = sas.mint(parsed.account, key_index, key, READ_PERMISSIONS, "",
                         int(now) + TOKEN_LIFETIME_S, now)
        access = Access(parsed.endpoints, parsed.account, token, parsed.tls, parsed.ca_file,
                        parsed.location, parsed.read_from)
        try:
            access.shared_client().scan_ranges()
        except Unauthenticated as exc:
            refused = exc
            continue
        return access
    raise Unauthenticated(f"the connection string's key signs no token the stamp accepts: "
                          f"{refused}")
