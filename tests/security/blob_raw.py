"""Raw HTTP to a front end's Azure Blob endpoint, for requests no SDK would send (duplicate
headers, raw bytes, stalled heads): tests/security/test_blob_endpoint.py and
test_internal_names.py. Requests are signed as the service reads them
(frontend/blob_auth.string_to_sign, itself checked against Azure's SDK in
tests/unit/test_blob_model.py). The endpoint may serve HTTP or HTTPS: `Endpoint.at` finds
out by offering a TLS handshake (its certificate is not what these tests are about)."""

from __future__ import annotations

import http.client
import socket
import ssl
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import parse_qsl

from frontend import blob_auth
from tools.local_stamp import LocalStamp

VERSION = "2021-12-02"
Answer = tuple[int, http.client.HTTPMessage, bytes]
Headers = list[tuple[str, str | bytes]]


def _unverified() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    tls: bool

    @classmethod
    def at(cls, stamp: LocalStamp, front_end: str = "fe-1") -> Endpoint:
        host, _, port = stamp.record(front_end).extra["http_address"].rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=10) as sock, \
                    _unverified().wrap_socket(sock):
                tls = True
        except (ssl.SSLError, OSError):
            tls = False
        return cls(host, int(port), tls)

    def connect(self, receive_buffer_bytes: int | None = None) -> socket.socket:
        """A connected socket (TLS handshake done when the endpoint serves HTTPS), with a
        receive buffer of about `receive_buffer_bytes` if given."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer_bytes is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer_bytes)
        sock.settimeout(10)
        sock.connect((self.host, self.port))
        return _unverified().wrap_socket(sock) if self.tls else sock

    def send(self, method: str, path: str, headers: Headers, body: bytes = b"",
             timeout_s: float = 30.0) -> Answer:
        """One request exactly as given (duplicates and raw bytes kept)."""
        conn = (http.client.HTTPSConnection(self.host, self.port, timeout=timeout_s,
                                            context=_unverified()) if self.tls else
                http.client.HTTPConnection(self.host, self.port, timeout=timeout_s))
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for name, value in headers:  # str as UTF-8 (http.client would send Latin-1)
                conn.putheader(name, value.encode() if isinstance(value, str) else value)
            conn.endheaders(body or None)
            response = conn.getresponse()
            return response.status, response.headers, response.read()
        finally:
            conn.close()


def signed(account: str, key: bytes, method: str, path: str,
           headers: list[tuple[str, str]] | None = None, body: bytes = b"") -> Headers:
    """`headers` with a date, a version and a Shared Key Authorization of `path`, signed as
    the service reads a request (duplicates joined with ',')."""
    sent = [("x-ms-date", formatdate(usegmt=True)), ("x-ms-version", VERSION),
            *(headers or [])]
    if body:
        sent.append(("Content-Length", str(len(body))))
    joined: dict[str, str] = {}
    for name, value in sent:
        lower = name.lower()
        joined[lower] = f"{joined[lower]},{value}" if lower in joined else value
    raw_path, _, query = path.partition("?")
    text = blob_auth.string_to_sign(method, joined, account, raw_path,
                                    parse_qsl(query, keep_blank_values=True))
    return [*sent, ("Authorization", f"SharedKey {account}:{blob_auth.sign(key, text)}")]
