"""Connection strings (issue 16, DESIGN §5): what a user holds to reach a stamp.

    Endpoint=HOST:PORT[,HOST:PORT...];Account=NAME;Key=BASE64[;CaFile=PATH | ;Tls=true]
    Endpoint=HOST:PORT[,HOST:PORT...];Account=NAME;SharedAccessSignature=TOKEN[;...]
    Location=HOST:PORT[,HOST:PORT...];Account=NAME;Key=BASE64[;...][;ReadFrom=secondary]

Rules (each broken one is an InvalidArgument naming it):
- `;`-separated `Name=Value` settings (one trailing `;` allowed), each name once, names as
  written above (case matters), no other names;
- exactly one of `Endpoint` (the front ends of one stamp) and `Location` (the servers of a
  location service, issue 30, which tell the account's primary stamp: stampsdk/location.py),
  each 1 to ENDPOINTS_MAX comma-separated `HOST:PORT`, PORT 1..65535, an IPv6 host in
  brackets (`[::1]:7000`), no duplicates;
- `Account`: an account name (stampsdk/names.py);
- exactly one of `Key` (standard base64 of KEY_BYTES bytes: a 256-bit account key) and
  `SharedAccessSignature` (a token in stampsdk/sas.py's form, of the same account);
- TLS (the front ends' doors, DESIGN §9): `CaFile` (a PEM file of the CA that issued the front
  ends' certificates: a local stamp's `<data dir>/tls/ca.crt`) or `Tls=true` (the system's
  trusted roots); without either the connection is plain (a stamp with `tls = false`). With a
  `Location`, both the location's servers and the stamps' front ends are reached so.
  `Tls=false` with a `CaFile` is refused.
- `ReadFrom` (issue 30, read access to the secondary: Azure's RA-GRS): `primary` (the
  default) or `secondary`: with a `Location`, a client of `ReadFrom=secondary` sends its
  reads (read, peek, get, subscribe, scan, list_logs, scan_ranges) to the account's
  secondary stamp, its writes still to the primary (stampsdk/aio.py says what it reads);
  with an `Endpoint`, the front ends named are read as the secondary's (a secondary's front
  ends answer only reads so marked: stampsdk/wire.py), and writes there are refused (Moved).

`format` writes the one canonical spelling; `parse(format(c)) == c`.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from stampsdk import names, sas
from stampsdk.errors import InvalidArgument

KEY_BYTES = 32  # an account key: 256 bits

ENDPOINTS_MAX = 64
HOST_CHARS_MAX = 253
CONNECTION_STRING_CHARS_MAX = 8192
SETTINGS = ("Endpoint", "Location", "Account", "Key", "SharedAccessSignature", "CaFile", "Tls",
            "ReadFrom")
PRIMARY = "primary"
SECONDARY = "secondary"
READ_FROM = (PRIMARY, SECONDARY)  # where a client reads (module docstring: `ReadFrom`)
CA_FILE_CHARS_MAX = 4096


@dataclass(frozen=True)
class ConnectionString:
    """A parsed connection string (module docstring): the front ends as HOST:PORT (or none,
    and the location's servers in `location`), the account, exactly one of its key (raw
    bytes) and a shared access token, TLS, and where reads go (`read_from`: PRIMARY or
    SECONDARY). Made by `parse` or `make`, which check every rule; its repr never shows the
    credential."""

    endpoints: tuple[str, ...]
    account: str
    key: bytes | None = None
    sas: str | None = None
    tls: bool = False  # TLS to the front ends (implied by `ca_file`)
    ca_file: str | None = None  # the CA to trust (None: the system's roots, with `tls`)
    location: tuple[str, ...] = ()  # a location's servers, instead of `endpoints`
    read_from: str = PRIMARY  # SECONDARY: reads go to the account's secondary stamp

    def __post_init__(self) -> None:
        if bool(self.endpoints) == bool(self.location):
            raise InvalidArgument("a connection string has exactly one of Endpoint and "
                                  "Location")
        if (self.key is None) == (self.sas is None):
            raise InvalidArgument("a connection string has exactly one of Key and "
                                  "SharedAccessSignature")
        if self.ca_file is not None and not self.tls:
            raise InvalidArgument("a connection string with a CaFile uses TLS")
        check_read_from(self.read_from)

    def format(self) -> str:
        """The canonical spelling: settings in the order Endpoint or Location, Account, Key
        or SharedAccessSignature, then CaFile or Tls=true, then ReadFrom=secondary (never
        ReadFrom=primary: the default); `parse(c.format()) == c`."""
        credential = (f"Key={base64.b64encode(self.key).decode()}" if self.key is not None
                      else f"SharedAccessSignature={self.sas}")
        transport = (f";CaFile={self.ca_file}" if self.ca_file is not None
                     else ";Tls=true" if self.tls else "")
        where = (f"Endpoint={','.join(self.endpoints)}" if self.endpoints
                 else f"Location={','.join(self.location)}")
        read_from = f";ReadFrom={self.read_from}" if self.read_from != PRIMARY else ""
        return f"{where};Account={self.account};{credential}{transport}{read_from}"

    def __repr__(self) -> str:  # never print a secret into a log by accident
        return (f"ConnectionString(endpoints={self.endpoints!r}, location={self.location!r}, "
                f"account={self.account!r}, "
                f"{'key=<secret>' if self.key is not None else 'sas=<secret>'}, "
                f"tls={self.tls!r}, ca_file={self.ca_file!r}, read_from={self.read_from!r})")


def make(endpoints: list[str] | tuple[str, ...], account: str, *, key: bytes | None = None,
         sas_token: str | None = None, tls: bool = False,
         ca_file: str | None = None,
         location: list[str] | tuple[str, ...] = (),
         read_from: str = PRIMARY) -> ConnectionString:
    """A checked ConnectionString (the same checks as `parse`); `ca_file` implies `tls`;
    `location` instead of `endpoints` (pass `[]` for those) names a location's servers;
    `read_from` SECONDARY sends reads to the secondary stamp (module docstring)."""
    return parse(ConnectionString(tuple(endpoints), account, key, sas_token,
                                  tls or ca_file is not None, ca_file, tuple(location),
                                  read_from).format())


def parse(text: str) -> ConnectionString:
    """The ConnectionString `text` spells; InvalidArgument naming the first rule it breaks
    (module docstring). A token is checked for form and account only, not signature or
    expiry: the front end checks those. No file is read (not even the CaFile)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("connection string is empty")
    if len(text) > CONNECTION_STRING_CHARS_MAX:
        raise InvalidArgument(f"connection string is longer than "
                              f"{CONNECTION_STRING_CHARS_MAX} characters")
    parts = text.split(";")
    if parts[-1] == "":
        parts.pop()
    settings: dict[str, str] = {}
    for part in parts:
        name, sep, value = part.partition("=")
        if not sep:
            raise InvalidArgument(f"connection string setting {part[:40]!r} is not Name=Value")
        if name not in SETTINGS:
            raise InvalidArgument(f"connection string has an unknown setting {name[:40]!r}; "
                                  f"the settings are {', '.join(SETTINGS)}")
        if name in settings:
            raise InvalidArgument(f"connection string has {name} twice")
        if not value:
            raise InvalidArgument(f"connection string's {name} is empty")
        settings[name] = value
    if ("Endpoint" in settings) == ("Location" in settings):
        raise InvalidArgument("connection string needs exactly one of Endpoint=... (a "
                              "stamp's front ends) and Location=... (a location service)")
    if "Account" not in settings:
        raise InvalidArgument("connection string has no Account=...")
    if ("Key" in settings) == ("SharedAccessSignature" in settings):
        raise InvalidArgument("connection string needs exactly one of Key=... and "
                              "SharedAccessSignature=...")
    endpoints = parse_endpoints(settings["Endpoint"]) if "Endpoint" in settings else ()
    location = parse_endpoints(settings["Location"]) if "Location" in settings else ()
    account = names.check_account(settings["Account"])
    use_tls, ca_file = parse_transport(settings)
    read_from = check_read_from(settings.get("ReadFrom", PRIMARY))
    if "Key" in settings:
        return ConnectionString(endpoints, account, key=parse_key(settings["Key"]),
                                tls=use_tls, ca_file=ca_file, location=location,
                                read_from=read_from)
    token = settings["SharedAccessSignature"]
    decoded = sas.decode(token)
    if decoded.account != account:
        raise InvalidArgument(f"connection string's SharedAccessSignature is for account "
                              f"{decoded.account!r}, not {account!r}")
    return ConnectionString(endpoints, account, sas=token, tls=use_tls, ca_file=ca_file,
                            location=location, read_from=read_from)


def check_read_from(read_from: object) -> str:
    """`read_from` if it is PRIMARY or SECONDARY; InvalidArgument otherwise."""
    if read_from not in READ_FROM:
        raise InvalidArgument(f"ReadFrom is {PRIMARY} or {SECONDARY}, not "
                              f"{str(read_from)[:40]!r}")
    return str(read_from)


def parse_transport(settings: dict[str, str]) -> tuple[bool, str | None]:
    """(TLS or not, the CA file) of `Tls` and `CaFile`."""
    ca_file = settings.get("CaFile")
    if ca_file is not None and len(ca_file) > CA_FILE_CHARS_MAX:
        raise InvalidArgument(f"connection string's CaFile is longer than "
                              f"{CA_FILE_CHARS_MAX} characters")
    flag = settings.get("Tls")
    if flag not in (None, "true", "false"):
        raise InvalidArgument("connection string's Tls is true or false")
    if flag == "false" and ca_file is not None:
        raise InvalidArgument("connection string has a CaFile and Tls=false")
    return flag == "true" or ca_file is not None, ca_file


def parse_key(text: str) -> bytes:
    """The KEY_BYTES bytes of a `Key` setting; InvalidArgument unless `text` is their
    canonical standard base64 (one spelling per key)."""
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("connection string's Key is not standard base64") from None
    if len(key) != KEY_BYTES:
        raise InvalidArgument(f"connection string's Key has {len(key)} bytes; an account key "
                              f"has {KEY_BYTES} (256 bits)")
    if base64.b64encode(key).decode() != text:
        raise InvalidArgument("connection string's Key is not in canonical base64")
    return key


def parse_endpoints(text: str) -> tuple[str, ...]:
    """The endpoints of an `Endpoint` setting, in order: 1 to ENDPOINTS_MAX comma-separated
    HOST:PORT (`parse_endpoint`), none twice; InvalidArgument otherwise."""
    endpoints = text.split(",")
    if len(endpoints) > ENDPOINTS_MAX:
        raise InvalidArgument(f"connection string has {len(endpoints)} endpoints; at most "
                              f"{ENDPOINTS_MAX}")
    for endpoint in endpoints:
        parse_endpoint(endpoint)
    if len(set(endpoints)) != len(endpoints):
        raise InvalidArgument("connection string names an endpoint twice")
    return tuple(endpoints)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of `HOST:PORT` or `[IPV6]:PORT`."""
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host:
        raise InvalidArgument(f"endpoint {endpoint[:80]!r} is not HOST:PORT")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3 or not all(
                c in "0123456789abcdefABCDEF:." for c in host[1:-1]):
            raise InvalidArgument(f"endpoint {endpoint[:80]!r}: an IPv6 host is written "
                                  f"[ADDRESS]")
    elif len(host) > HOST_CHARS_MAX or not all(
            c.isascii() and (c.isalnum() or c in "-.") for c in host):
        raise InvalidArgument(f"endpoint {endpoint[:80]!r}: a host has only letters, digits, "
                              f"'-' and '.' (at most {HOST_CHARS_MAX})")
    if not (port_text.isascii() and port_text.isdigit()) or port_text.startswith("0") \
            or not 1 <= int(port_text) <= 65535:
        raise InvalidArgument(f"endpoint {endpoint[:80]!r}: the port is a number from 1 to "
                              f"65535")
    return host, int(port_text)
