"""The stamp's certificates and this process's TLS identity (DESIGN §9, issue 28).

Inside a stamp every process holds a certificate issued by the stamp's CA and every gRPC
connection between processes is mutual TLS: a server refuses a caller without a certificate
of the same CA (the lock service's `Get` hands out account keys; a partition server acts for
any account). Front ends also serve the public, with server-only TLS (the SDK signs its
requests; it needs no certificate).

Files, in a stamp's TLS directory (`<data dir>/tls`, `dir_in`):
- `ca.crt`, `ca.key`: the CA (EC P-256, which gRPC's BoringSSL takes everywhere). `stamp up`
  makes one for a stamp of one machine; a stamp across hosts (`[hosts]`) has a copy of the
  same two files on every host, made once with `python -m common.tls make-ca DIR` (as the
  stamp secret is made and copied, common/stamp_secret.py): a host never makes its own CA.
- `NAME.crt`, `NAME.key`: each process's certificate (server and client use; SANs: its host
  as an IP address or DNS name, and DNS:localhost), and `operator.crt` / `operator.key`, the
  client certificate of operators' tools (the `stamp` CLI, `*.from_stamp` clients, tests).
Keys are mode 0600 and never leave their file: processes get the directory's PATH
(`--tls-dir`), stamp.json records only that path, and no log line or error holds a key.

This process's identity (`use`, `trust`): a server uses its own certificate for every
channel it makes and for its port (`server_credentials`); an operator's tool talks to the
addresses of a stamp it found (`trust`, from stamp.json) with that stamp's operator
certificate. `channel_credentials(address)` is what `common.rpc` makes channels with: None
means a plain connection (a stamp with `tls = false`).
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from common.durable_fs import fsync_dir, make_dirs
from common.errors import InvalidArgument

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

# cryptography is imported only where certificates are made (make_ca, issue): every server
# and tool imports this module for its identity, and importing cryptography cost each of them
# about 0.06 CPU-s at start-up (gRPC reads the PEM files itself).

TLS_DIR = "tls"
CA = "ca"
OPERATOR = "operator"
KEY_FILE_MODE = 0o600
CERT_FILE_MODE = 0o644
CA_VALIDITY_DAYS = 3650
CERT_VALIDITY_DAYS = 825  # the most a public CA may issue; rotate by re-issuing (SECURITY.md)
CLOCK_SKEW_S = 300  # certificates are valid from a little before they are made
CERT_FILE_BYTES_MAX = 64 * 1024


@dataclass(frozen=True)
class Identity:
    """A CA to trust and a certificate (with its key) to present, as PEM."""

    ca: bytes  # b"": the system's trusted roots (a front end's public certificate)
    cert: bytes
    key: bytes = field(repr=False)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Mutual TLS: trust only the stamp's CA, present this certificate."""
        return _cached(self, "channel", lambda: grpc.ssl_channel_credentials(
            root_certificates=self.ca or None, private_key=self.key,
            certificate_chain=self.cert))

    def server_credentials(self, require_client_auth: bool = True) -> grpc.ServerCredentials:
        """This certificate for a port; with `require_client_auth` a caller must present a
        certificate of the stamp's CA (the handshake fails otherwise)."""
        return grpc.ssl_server_credentials([(self.key, self.cert)], root_certificates=self.ca,
                                           require_client_auth=require_client_auth)


_credentials: dict[tuple[int, str], grpc.ChannelCredentials] = {}


def _cached(identity: Identity, kind: str,
            make: Callable[[], grpc.ChannelCredentials]) -> grpc.ChannelCredentials:
    """One credentials object per identity: gRPC builds an SSL context from each."""
    key = (id(identity), kind)
    with _lock:
        found = _credentials.get(key)
        if found is None:
            found = _credentials[key] = make()
            _keep.append(identity)  # id() stays unique while the identity lives
        return found


# ---- this process's identity ----------------------------------------------------------------

_lock = threading.Lock()
_keep: list[Identity] = []
_own: Identity | None = None
_by_address: dict[str, Identity | None] = {}


def use(identity: Identity | None) -> None:
    """This process is `identity` (a server, at start: its own certificate) for every channel
    to an address not named by `trust`, and for its ports. None: plain connections."""
    global _own
    _own = identity


def own() -> Identity | None:
    return _own


def trust(addresses: list[str], identity: Identity | None) -> None:
    """Talk to `addresses` (a stamp's processes) as `identity` (its operator certificate;
    None: that stamp has no TLS). Replaces what was said of them before."""
    with _lock:
        for address in addresses:
            if address:
                _by_address[address] = identity


def identity_for(address: str) -> Identity | None:
    """Who this process is to `address`: what `trust` said of it, else `use`'s identity."""
    return _by_address.get(address, _own)


def channel_credentials(address: str) -> grpc.ChannelCredentials | None:
    """Credentials for a channel to `address`; None: a plain channel."""
    identity = identity_for(address)
    return None if identity is None else identity.channel_credentials()


def server_credentials() -> grpc.ServerCredentials | None:
    """Mutual-TLS credentials for an internal server's port; None: a plain port."""
    return None if _own is None else _own.server_credentials()


# ---- a front end's public door ------------------------------------------------------------

def public_server_credentials(cert_file: str | Path, key_file: str | Path
                              ) -> grpc.ServerCredentials:
    """Server-only TLS for a public port: the SDK checks the front end's certificate and
    signs its requests; it presents none."""
    return grpc.ssl_server_credentials([(_read(Path(key_file), secret=True),
                                         _read(Path(cert_file)))],
                                       require_client_auth=False)


def public_ssl_context(cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    """The blob endpoint's HTTPS (TLS 1.2 at least), from the same files."""
    _read(Path(key_file), secret=True)  # the same checks (mode, PEM) before ssl reads it
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(cert_file), str(key_file))
    return context


def trusting(identity: Identity, ca_file: str) -> Identity:
    """`identity`, trusting the CA in `ca_file` instead ("": the system's roots): for front
    ends that show a public certificate."""
    return Identity(_read(Path(ca_file)) if ca_file else b"", identity.cert, identity.key)


# ---- files ----------------------------------------------------------------------------------

def dir_in(data_dir: str | Path) -> Path:
    """Where a stamp keeps its CA and certificates."""
    return Path(data_dir) / TLS_DIR


def cert_path(tls_dir: str | Path, name: str) -> Path:
    return Path(tls_dir) / f"{name}.crt"


def key_path(tls_dir: str | Path, name: str) -> Path:
    return Path(tls_dir) / f"{name}.key"


_loaded: dict[tuple[str, str, int], Identity] = {}


def load(tls_dir: str | Path, name: str) -> Identity:
    """The identity `name` (a process, or OPERATOR) of the stamp whose TLS directory is
    `tls_dir`; the same object while its certificate file is unchanged (one SSL context per
    identity). InvalidArgument naming the file (never its content) if one is missing, too
    large, or a key that others may read."""
    try:
        changed = os.stat(cert_path(tls_dir, name)).st_mtime_ns
    except OSError:
        changed = 0
    at = (str(Path(tls_dir).resolve()), name, changed)
    found = _loaded.get(at)
    if found is None:
        found = _loaded[at] = Identity(
            ca=_read(cert_path(tls_dir, CA)), cert=_read(cert_path(tls_dir, name)),
            key=_read(key_path(tls_dir, name), secret=True))
    return found


def _read(path: Path, secret: bool = False) -> bytes:
    try:
        if secret and os.stat(path).st_mode & 0o077:
            raise InvalidArgument(f"{path} may be read by others: chmod 600 it")
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidArgument(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > CERT_FILE_BYTES_MAX or b"-----BEGIN" not in data:
        raise InvalidArgument(f"{path} is not a PEM file")
    return data


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write `path` whole (a temporary file made with `mode` first, then renamed: a key is
    never readable by others, not even for a moment), durably."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # whatever the umask
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(tls_dir: str | Path, common_name: str = "Stamp CA") -> bool:
    """Make the CA in `tls_dir` unless one is there; return whether this call made it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    tls_dir = make_dirs(tls_dir)
    if cert_path(tls_dir, CA).exists():
        return False
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=CLOCK_SKEW_S))
            .not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256()))
    _write(key_path(tls_dir, CA), _pem_key(key), KEY_FILE_MODE)
    _write(cert_path(tls_dir, CA), cert.public_bytes(serialization.Encoding.PEM),
           CERT_FILE_MODE)
    return True


def has_ca_key(tls_dir: str | Path) -> bool:
    return key_path(tls_dir, CA).exists() and cert_path(tls_dir, CA).exists()


def issue(tls_dir: str | Path, name: str, hosts: list[str], server: bool = True) -> None:
    """Issue `name`'s key and certificate from the CA in `tls_dir` (replacing any): for
    `hosts` (IP addresses or DNS names; DNS:localhost always) when `server`, else a client
    certificate only (OPERATOR)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key = serialization.load_pem_private_key(_read(key_path(tls_dir, CA), secret=True),
                                                password=None)
    ca_cert = x509.load_pem_x509_certificate(_read(cert_path(tls_dir, CA)))
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH]
                                                  if server else [])
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(seconds=CLOCK_SKEW_S))
               .not_valid_after(now + datetime.timedelta(days=CERT_VALIDITY_DAYS))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                   ca_cert.public_key()), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(_san(hosts)),
                                        critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    _write(key_path(tls_dir, name), _pem_key(key), KEY_FILE_MODE)
    _write(cert_path(tls_dir, name), cert.public_bytes(serialization.Encoding.PEM),
           CERT_FILE_MODE)


def _san(hosts: list[str]) -> list[x509.GeneralName]:
    from cryptography import x509

    names: list[x509.GeneralName] = [x509.DNSName("localhost")]
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host.strip("[]"))))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def ensure_issued(tls_dir: str | Path, name: str, hosts: list[str],
                  server: bool = True) -> None:
    """Issue `name`'s certificate unless it has one."""
    if not (cert_path(tls_dir, name).exists() and key_path(tls_dir, name).exists()):
        issue(tls_dir, name, hosts, server)


def main(argv: list[str] | None = None) -> int:
    """`python -m common.tls make-ca DIR`: the CA of a stamp across hosts, made once and
    copied to `<data dir>/tls/` on every host."""
    parser = argparse.ArgumentParser(prog="python -m common.tls")
    parser.add_argument("command", choices=["make-ca"])
    parser.add_argument("dir", type=Path, help="the directory to make ca.crt and ca.key in")
    args = parser.parse_args(argv)
    if not make_ca(args.dir):
        print(f"{cert_path(args.dir, CA)} exists: left as it is", file=sys.stderr)
        return 1
    print(f"made {cert_path(args.dir, CA)} and {key_path(args.dir, CA)} (mode 0600)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
