"""Issue 28 against the Azure Blob REST endpoint of a real front end (items 3, 5 and 7's
blob bullets), with raw HTTP (http.client, sockets): what a stranger can send that an SDK
never would.

- no credentials, or an account name no account can have, is refused before any account
  lookup, and a refusal echoes no long name;
- a non-ASCII signature is a 403 like any bad signature, not a 500;
- a refusal does not say whether an account exists;
- a query parameter or a signed header given twice is refused;
- metadata names are C# identifiers and nothing XML cannot carry reaches List Blobs;
- a request head or body that stalls is cut (slowloris), and so is an answer not read;
- the documented limits fit in a request (8 KiB of metadata), and more is refused;
- a request aiohttp cannot parse is logged in a line, not a traceback;
- the endpoint's own groups (`$containers`, `$c/...`) are out of reach of the public gRPC
  API with any credential (test_internal_names.py has the pure part).

One small stamp (one front end, its headers timeout short) for the module.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import os
import signal
import socket
import ssl
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from stampsdk import Client

from common.clock import SystemClock
from common.process import LOG_FILE
from common.proto import partition_pb2 as pb
from frontend import sas, wire
from frontend.accounts import Account, AccountStore
from frontend.blob_model import CONTAINERS_GROUP
from lock_service.client import LockClient
from tests.conftest import module_stamp
from tests.front_end_raw import RawFrontEnd
from tests.front_end_raw import signed as signed_call
from tests.security.blob_raw import Answer, Endpoint, signed
from tests.support.waiting import wait_until
from tools.local_stamp import LocalStamp

pytestmark = pytest.mark.slow  # one whole stamp for the module
HEADERS_TIMEOUT_MS = 1500
METADATA_BYTES_MAX = 8 * 1024  # Azure's documented limit: names and values together
# A refusal made without asking the account store comes at once; one that asks a stopped
# store waits for it (the lock client's retries) far longer.
ANSWERED_WITHOUT_LOOKUP_S = 5.0
HEADERS_TOO_MANY = 300  # more than a request needs (frontend/blob_server.HEADERS_MAX)
_names = itertools.count(1)


@pytest.fixture(scope="module")
def stamp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStamp]:
    with module_stamp(tmp_path_factory, "blob-security",
                      front_end={"blob_headers_timeout_ms": HEADERS_TIMEOUT_MS},
                      extent_nodes=3, stream_managers=1, lock_servers=1,
                      partition_managers=1, partition_servers=1, front_ends=1) as local:
        yield local


@pytest.fixture(scope="module")
def account(stamp: LocalStamp) -> Account:
    with LockClient.from_stamp(stamp.data_dir, holder="test-blob-security") as locks:
        return AccountStore(locks, SystemClock(), cache_ttl_s=0).create("blobsec")


@pytest.fixture(scope="module")
def endpoint(stamp: LocalStamp) -> Endpoint:
    return Endpoint.at(stamp)


def error_code(answer: Answer) -> tuple[int, str | None]:
    return answer[0], answer[1].get("x-ms-error-code")


@contextlib.contextmanager
def account_store_frozen(stamp: LocalStamp) -> Iterator[None]:
    """The account store (the stamp's one lock replica) stopped, by PID, for the block: a
    request that looks an account up meanwhile waits or fails."""
    pid = stamp.record("lock-1").pid
    assert pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_no_credentials_and_impossible_names_are_refused_before_any_lookup(
        stamp: LocalStamp, endpoint: Endpoint) -> None:
    long_name = "x" * 6000  # no account can have it: not asked for, not echoed
    with account_store_frozen(stamp):
        started = time.monotonic()
        for n in range(10):  # names that could be accounts, no credentials
            answer = endpoint.send("GET", f"/ghost-{n}-{next(_names)}?comp=list", [],
                                   timeout_s=ANSWERED_WITHOUT_LOOKUP_S)
            assert error_code(answer) == (401, "NoAuthenticationInformation")
        for n in range(10):
            path = f"/{long_name}{n}/c?restype=container"
            answer = endpoint.send("GET", path, signed(long_name + str(n), b"k" * 32, "GET",
                                                       path),
                                   timeout_s=ANSWERED_WITHOUT_LOOKUP_S)
            assert error_code(answer) == (403, "AuthenticationFailed")
            assert len(answer[2]) < 4000, f"the refusal echoes {len(answer[2])} bytes"
        assert time.monotonic() - started < ANSWERED_WITHOUT_LOOKUP_S


def test_a_non_ascii_signature_is_a_bad_signature(account: Account,
                                                  endpoint: Endpoint) -> None:
    path = f"/{account.name}?comp=list"
    headers = signed(account.name, account.keys[0], "GET", path)[:-1]
    for signature in ("é" * 44, "\udcff" * 44):
        value = f"SharedKey {account.name}:{signature}".encode("utf-8", "surrogateescape")
        answer = endpoint.send("GET", path, [*headers, ("Authorization", value)])
        assert error_code(answer) == (403, "AuthenticationFailed"), answer
    sas = (f"/{account.name}/c/b?sv=2021-12-02&sr=b&sp=r&se=2099-01-01T00:00:00Z"
           f"&sig={quote('é' * 44)}")
    assert error_code(endpoint.send("GET", sas, [])) == (403, "AuthenticationFailed")


def refusal(answer: Answer) -> tuple[int, str | None, str]:
    """The refusal without what varies per request (its id and time, the string to sign:
    the request's own headers): what a stranger learns from it."""
    message = ElementTree.fromstring(answer[2]).findtext("Message") or ""
    message = message.split("\nRequestId:")[0].split("string to sign:")[0]
    return answer[0], answer[1].get("x-ms-error-code"), message


def test_refusals_do_not_say_whether_an_account_exists(account: Account,
                                                       endpoint: Endpoint) -> None:
    wrong_key = b"w" * 32
    seen = set()
    for name in (account.name, f"ghost-{next(_names)}", "Not_A_Name"):
        path = f"/{name}/c?restype=container"
        shared_key = endpoint.send("GET", path, signed(name, wrong_key, "GET", path))
        sas = endpoint.send("GET", f"/{name}/c/b?sv=2021-12-02&sr=b&sp=r"
                   f"&se=2099-01-01T00:00:00Z&sig={quote(base64.b64encode(wrong_key).decode())}",
                   [])
        seen.add((refusal(shared_key), refusal(sas)))
    assert len(seen) == 1, seen


def test_duplicate_query_parameters_and_signed_headers_are_refused(
        account: Account, endpoint: Endpoint) -> None:
    listing = f"/{account.name}?comp=list"
    assert endpoint.send("GET", listing, signed(account.name, account.keys[0], "GET",
                                                listing))[0] == 200
    for path, extra in ((f"{listing}&prefix=a&prefix=b", []),
                        (f"{listing}&prefix=a&PREFIX=b", []),
                        (listing, [("x-ms-client-request-id", "1"),
                                   ("x-ms-client-request-id", "2")]),
                        (listing, [("If-Match", '"0x1"'), ("If-Match", "*")])):
        answer = endpoint.send("GET", path,
                      signed(account.name, account.keys[0], "GET", path, extra))
        assert answer[0] == 400, (path, extra, answer)


def test_metadata_names_and_control_characters_stay_out_of_list_xml(
        account: Account, endpoint: Endpoint) -> None:
    key = account.keys[0]
    container = f"/{account.name}/meta"
    path = f"{container}?restype=container"
    assert endpoint.send("PUT", path, signed(account.name, key, "PUT", path))[0] == 201
    put = [("x-ms-blob-type", "AppendBlob"), ("Content-Length", "0")]
    ok = f"{container}/fine"
    assert endpoint.send("PUT", ok, signed(account.name, key, "PUT", ok, [
        *put, ("x-ms-meta-Good_1", "v")]))[0] == 201
    for blob, metadata in (("first", ("x-ms-meta-1st", "v")), ("dotted", ("x-ms-meta-a.b", "v")),
                           ("dollar", ("x-ms-meta-a$b", "v")),
                           ("value", ("x-ms-meta-a", "caf\u00e9")),
                           ("twice", ("x-ms-meta-GOOD_1", "w"))):
        path = f"{container}/{blob}"
        extra = [*put, metadata] + ([("x-ms-meta-good_1", "v")] if blob == "twice" else [])
        answer = endpoint.send("PUT", path, signed(account.name, key, "PUT", path, extra))
        assert answer[0] == 400, (blob, metadata, answer)
    control = f"{container}/a%01b"
    answer = endpoint.send("PUT", control, signed(account.name, key, "PUT", control, put))
    assert error_code(answer) == (400, "InvalidResourceName")
    echoed = f"{container}?restype=container&comp=list&prefix=%01"
    answer = endpoint.send("GET", echoed, signed(account.name, key, "GET", echoed))
    assert answer[0] == 400
    listing = f"{container}?restype=container&comp=list&include=metadata"
    status, _, body = endpoint.send("GET", listing, signed(account.name, key, "GET", listing))
    assert status == 200
    blobs = ElementTree.fromstring(body).findall("./Blobs/Blob")
    assert [(b.findtext("Name"), b.findtext("Metadata/Good_1")) for b in blobs] == [
        ("fine", "v")]


def closed_within(sock: socket.socket, timeout_s: float, trickle: bytes = b"",
                  until: bytes | None = None) -> bytes:
    """What the server sends until it closes `sock` (or has sent `until`), sending `trickle`
    a byte at a time meanwhile; AssertionError if it has not after `timeout_s`."""
    sock.settimeout(0.2)
    received = b""
    deadline = time.monotonic() + timeout_s
    for byte in itertools.cycle(trickle or b"\x00"):
        if time.monotonic() > deadline:
            raise AssertionError(f"the connection is still open after {timeout_s} s")
        try:
            data = sock.recv(65536)
            if not data:
                return received
            received += data
            if until is not None and until in received:
                return received
        except TimeoutError:
            pass
        except ConnectionResetError:
            return received
        if trickle:
            try:
                sock.sendall(bytes((byte,)))
            except (BrokenPipeError, ConnectionResetError):
                return received
    raise AssertionError("unreachable")


def test_a_stalled_request_head_or_body_is_cut(account: Account,
                                               endpoint: Endpoint) -> None:
    limit_s = HEADERS_TIMEOUT_MS / 1000 + 3
    with endpoint.connect() as idle:  # sends nothing at all
        closed_within(idle, limit_s)
    with endpoint.connect() as slow:  # a head that never ends
        slow.sendall(f"GET /{account.name}?comp=list HTTP/1.1\r\nHost: x\r\n".encode())
        closed_within(slow, limit_s, trickle=b"x-ms-slow: " + b"a" * 1000)
    key = account.keys[0]
    path = f"/{account.name}/slow?restype=container"
    assert endpoint.send("PUT", path, signed(account.name, key, "PUT", path))[0] == 201
    blob = f"/{account.name}/slow/b"
    assert endpoint.send("PUT", blob, signed(account.name, key, "PUT", blob, [
        ("x-ms-blob-type", "AppendBlob"), ("Content-Length", "0")]))[0] == 201
    append = f"{blob}?comp=appendblock"
    body = b"z" * 1000
    head = signed(account.name, key, "PUT", append, body=body)
    with endpoint.connect() as stalled:  # a body that stops
        stalled.sendall(f"PUT {append} HTTP/1.1\r\nHost: x\r\n".encode()
                        + b"".join(f"{n}: {v}\r\n".encode() for n, v in head)
                        + b"\r\n" + body[:10])
        # Answered in time; aiohttp then reads (and drops) what may still come for its
        # lingering_time (10 s) before it closes.
        answer = closed_within(stalled, limit_s, until=b"</Error>")
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    status, _, data = endpoint.send("GET", blob, signed(account.name, key, "GET", blob))
    assert (status, data) == (200, b"")  # nothing of it was appended


def test_the_documented_limits_fit_and_more_is_refused(account: Account,
                                                       endpoint: Endpoint) -> None:
    key = account.keys[0]
    path = f"/{account.name}/limits?restype=container"
    assert endpoint.send("PUT", path, signed(account.name, key, "PUT", path))[0] == 201
    put = [("x-ms-blob-type", "AppendBlob"), ("Content-Length", "0")]
    blob = f"/{account.name}/limits/b"
    whole = [*put, ("x-ms-meta-m", "v" * (METADATA_BYTES_MAX - 1))]  # Azure's 8 KiB, in one
    answer = endpoint.send("PUT", blob, signed(account.name, key, "PUT", blob, whole))
    assert answer[0] == 201, answer
    over = [*put, ("x-ms-meta-m", "v" * METADATA_BYTES_MAX)]
    answer = endpoint.send("PUT", blob, signed(account.name, key, "PUT", blob, over))
    assert error_code(answer) == (400, "MetadataTooLarge")
    many = [*put, *((f"x-ms-meta-m{n}", "v") for n in range(HEADERS_TOO_MANY))]
    answer = endpoint.send("PUT", blob, signed(account.name, key, "PUT", blob, many))
    assert answer[0] in (400, 431), answer
    wait_until(lambda: endpoint.send("GET", blob, signed(account.name, key, "GET", blob))[0]
               == 200, 10, "the endpoint answers after the refusals")


def test_malformed_requests_are_logged_in_one_line_not_a_traceback(
        stamp: LocalStamp, endpoint: Endpoint) -> None:
    log = Path(stamp.record("fe-1").dir) / LOG_FILE
    start = log.stat().st_size

    def malformed() -> int:  # a control character in a header: aiohttp's parser refuses it
        return endpoint.send("GET", "/x", [("x-ms-bad", b"a\x01b")])[0]

    def added() -> str:
        with log.open("rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    assert all(malformed() == 400 for _ in range(30))
    # The next second's first refusal is logged (the 30 may all fall in one already logged).
    wait_until(lambda: malformed() == 400 and ("malformed HTTP request" in added()
                                               or "Traceback" in added()), 10,
               "a refusal logged")
    assert "Traceback" not in added(), added()[-2000:]
    assert added().count("malformed HTTP request") < 10


def test_an_answer_its_client_does_not_read_is_cut(account: Account,
                                                   endpoint: Endpoint) -> None:
    """A Get Blob larger than the kernel's buffers (4 MiB of send buffer here) to a client
    that reads nothing: the front end stops holding it once a write is not taken in time
    (headers timeout + 256 KiB at 256 KiB/s here), instead of waiting for ever."""
    key = account.keys[0]
    path = f"/{account.name}/reader?restype=container"
    assert endpoint.send("PUT", path, signed(account.name, key, "PUT", path))[0] == 201
    blob = f"/{account.name}/reader/big"
    assert endpoint.send("PUT", blob, signed(account.name, key, "PUT", blob, [
        ("x-ms-blob-type", "AppendBlob"), ("Content-Length", "0")]))[0] == 201
    block = b"r" * (256 * 1024)
    append = f"{blob}?comp=appendblock"
    blocks = 24
    for _ in range(blocks):
        answer = endpoint.send("PUT", append, signed(account.name, key, "PUT", append,
                                                     body=block), block)
        assert answer[0] == 201, answer
    with endpoint.connect(receive_buffer_bytes=4096) as reader:
        reader.sendall(f"GET {blob} HTTP/1.1\r\nHost: x\r\n".encode()
                       + b"".join(f"{n}: {v}\r\n".encode()
                                  for n, v in signed(account.name, key, "GET", blob))
                       + b"\r\n")
        time.sleep(HEADERS_TIMEOUT_MS / 1000 + 1 + 2)  # the stimulus: a client that stalls
        received = 0
        deadline = time.monotonic() + 20
        with contextlib.suppress(ConnectionError, ssl.SSLError):  # cut: reset
            while time.monotonic() < deadline and (data := reader.recv(1 << 20)):
                received += len(data)
    assert received < blocks * len(block), f"all {received} bytes came"


def test_no_credential_reaches_the_blob_endpoints_groups(stamp: LocalStamp, account: Account,
                                                         endpoint: Endpoint) -> None:
    """Not by naming them, not by scanning the whole account — with the key, or a token
    whose prefix is empty; the endpoint itself still finds its container and blob."""
    key = account.keys[0]
    path = f"/{account.name}/hidden?restype=container"
    assert endpoint.send("PUT", path, signed(account.name, key, "PUT", path))[0] == 201
    blob = f"/{account.name}/hidden/b"
    assert endpoint.send("PUT", blob, signed(account.name, key, "PUT", blob, [
        ("x-ms-blob-type", "AppendBlob"), ("Content-Length", "0")]))[0] == 201
    now = time.time()
    tokens = {"key": None,
              "token, empty prefix": sas.mint(account.name, 1, key, ["read", "scan", "write"],
                                              "", int(now) + 600, now)}
    address = stamp.address("fe-1")
    raw = RawFrontEnd(address)
    try:
        for credential, token in tokens.items():
            with Client([address], account.name, key=None if token else key,
                        sas=token) as client:
                client.put("visible", b"r", b"v")
                seen = {entity.pname for entity in client.scan()}
                assert seen == {"visible"}, f"{credential}: a scan saw {seen}"
            credentials = wire.Credentials(account.name, key=None if token else key, sas=token)
            for internal in (CONTAINERS_GROUP, "$c/hidden/0"):  # past the SDK's own checks
                get = pb.Request(account=account.name, pname=internal,
                                 get=pb.GetOp(row=b"hidden"))
                answer = raw.call(signed_call(get, credentials))
                assert answer.error in ("InvalidArgument", "PermissionDenied"), answer
                assert "stamp's own" in answer.message and not answer.value
    finally:
        raw.close()
    listing = f"/{account.name}/hidden?restype=container&comp=list"
    status, _, body = endpoint.send("GET", listing, signed(account.name, key, "GET", listing))
    assert status == 200
    assert [b.findtext("Name") for b in ElementTree.fromstring(body).iter("Blob")] == ["b"]
