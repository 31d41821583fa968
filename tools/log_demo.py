"""`stamp demo`, part one: the SDK path — a user with a connection string, through the front
ends (issue 16).

With the admin account's connection string (`DATA_DIR/admin-connection-string`, written by
`stamp up`; a `demo` account is made when there is none), it appends records to a log, reads
them back (CRC32C checked end to end), follows the log with a live subscription, then
SIGKILLs the partition server that owns the log and keeps appending: the partition manager
gives the partition to the other server and the front ends route to it. Every acknowledged
record is still at its sequence number and the subscription resumes where it stopped. Then
entities with ETags (a stale ETag is refused), a scan resumed from its continuation token,
and a shared access token that may read the log but not append to it.

`run_analytics` ends the demo: records per log counted by Spark (local[2]) through the Stamp
data source (spark/datasource.py), beside what each log's peek says.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator

from stampsdk import Client, connection_string
from stampsdk.connection_string import ConnectionString
from stampsdk.errors import PermissionDenied, PreconditionFailed

from common.clock import SystemClock
from common.errors import AlreadyExists, StampError
from frontend import sas
from frontend.accounts import AccountStore
from lock_service.client import LockClient
from partition_layer import keys
from partition_layer.client import PartitionClient
from tools.local_stamp import LocalStamp
from tools.progress import waiting

DEMO_ACCOUNT = "demo"


def _ms(started: float) -> str:
    return f"{(time.perf_counter() - started) * 1000:.1f} ms"


def run_log_demo(stamp: LocalStamp) -> list[str]:
    """The SDK part; returns the logs it wrote (for `run_analytics`)."""
    cs, source = _connection_string(stamp)
    print(f"account {cs.account}, connection string from {source}; front ends "
          f"{', '.join(cs.endpoints)}")
    suffix = secrets.token_hex(2)
    log = f"orders-{suffix}"
    with _client(cs) as client:
        _logs(stamp, client, cs, log)
        _entities(client, f"users-{suffix}")
        extra = {f"clicks-{suffix}": 300, f"views-{suffix}": 1200}
        for name, count in extra.items():
            client.append(name, [b"%s %d" % (name.encode(), i) for i in range(count)])
    _shared_access(stamp, cs, log)
    return [log, *extra]


def run_analytics(stamp: LocalStamp, logs: list[str]) -> None:
    """Records per log, counted by Spark through the data source (module docstring)."""
    from spark.datasource import register
    from spark.session import spark_session

    cs, _ = _connection_string(stamp)
    print("Analytics: records per log, counted by Spark through the Stamp data source:")
    started = time.perf_counter()
    try:
        with waiting("demo", "starting Spark local[2]"):
            session = spark_session("local[2]", app_name="stamp-demo")
    except StampError as exc:  # no Java 17+: say so, the rest of the demo stands
        print(f"  skipped: {exc}")
        return
    try:
        session.sparkContext.setLogLevel("ERROR")
        register(session)
        print(f"  Spark local[2] started in {_ms(started)}")
        started = time.perf_counter()
        with waiting("demo", f"Spark counting the records of {len(logs)} logs"):
            df = (session.read.format("stamp").option("connectionString", cs.format())
                  .option("log", ",".join(logs)).load())
            counts = {row["log"]: row["count"]
                      for row in df.groupBy("log").count().collect()}
        print(f"  {df.rdd.getNumPartitions()} Spark partition(s), counted in {_ms(started)}")
    finally:
        session.stop()
    with _client(cs) as client:
        for log in logs:
            first_seq, next_seq = client.peek(log)
            assert counts.get(log, 0) == next_seq - first_seq, (log, counts)
            print(f"  {log:<16} {counts.get(log, 0):>6} records (peek: seq {first_seq} to "
                  f"{next_seq - 1})")


def _client(cs: ConnectionString, sas_token: str | None = None) -> Client:
    return Client(list(cs.endpoints), cs.account, key=None if sas_token else cs.key,
                  sas=sas_token, tls=cs.tls, ca_file=cs.ca_file)


def _connection_string(stamp: LocalStamp) -> tuple[ConnectionString, str]:
    """The admin account's connection string, or one of a `demo` account made for it."""
    path = stamp.admin_connection_string_file
    if path.exists():
        return connection_string.parse(path.read_text().strip()), str(path)
    with _accounts(stamp) as store:
        try:
            account = store.create(DEMO_ACCOUNT)
        except AlreadyExists:
            account = store.get(DEMO_ACCOUNT)
    endpoints = [r.address for r in stamp.front_ends()]
    return (connection_string.make(endpoints, DEMO_ACCOUNT, key=account.keys[0]),
            f"a new '{DEMO_ACCOUNT}' account (no {path.name} in the data directory)")


@contextlib.contextmanager
def _accounts(stamp: LocalStamp) -> Iterator[AccountStore]:
    with LockClient.from_stamp(str(stamp.data_dir), holder="stamp-demo") as lock_client:
        yield AccountStore(lock_client, SystemClock())


def _owner(stamp: LocalStamp, account: str, log: str) -> str:
    """The partition server serving `log` (an operator's view: the partition map)."""
    with PartitionClient([r.address for r in stamp.partition_managers()],
                         stamp.config.partition) as pc:
        return pc.partition_map()[0].lookup(keys.pname_prefix(account, log)).server


def _logs(stamp: LocalStamp, client: Client, cs: ConnectionString, log: str) -> None:
    print(f"log {log}:")
    followed: list[tuple[int, bytes]] = []

    def follow() -> None:
        with _client(cs) as follower_client:  # a client of its own: the thread's
            for seq, data in follower_client.subscribe(log, 0):
                followed.append((seq, data))

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    written: list[tuple[int, bytes]] = []
    for records in ([b"order 1: 2 apples"], [b"order 2: 1 pear", b"order 3: 6 plums"]):
        started = time.perf_counter()
        first = client.append(log, records)
        written += [(first + i, r) for i, r in enumerate(records)]
        print(f"  appended {len(records)} record(s) at seq {first}, durable on 3 extent "
              f"nodes, in {_ms(started)}")
    started = time.perf_counter()
    assert client.read(log, 0, 100) == written
    print(f"  read seq 0..{len(written) - 1} back in {_ms(started)}, CRC32C checked end to end")

    owner = _owner(stamp, cs.account, log)
    print(f"SIGKILL {owner}, the partition server of {log}, and keep appending:")
    stamp.kill(owner)
    started = time.perf_counter()
    with waiting("demo", f"appending while the partition manager gives {log} to another "
                         f"partition server"):
        first = client.append(log, [b"order 4: written after the kill"])
    written.append((first, b"order 4: written after the kill"))
    print(f"  {_owner(stamp, cs.account, log)} took the partition over; the append was "
          f"acknowledged at seq {first} {_ms(started)} after the kill")
    for i in range(5, 10):
        record = f"order {i}".encode()
        written.append((client.append(log, [record]), record))
    with waiting("demo", f"restarting {owner}") as progress:
        stamp.start(owner, progress=progress)
    print(f"  {owner} restarted")
    assert client.read(log, 0, 100) == written
    deadline = time.monotonic() + 30
    while len(followed) < len(written) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert followed == written, "the subscription missed records"
    print(f"  all {len(written)} records at their sequence numbers; the subscription saw "
          f"every one in order, across the failover")
    client.trim(log, 3)
    client.seal(log)  # the subscription ends: a sealed log has nothing more to come
    follower.join(10)
    first_seq, next_seq = client.peek(log)
    print(f"  trimmed below 3 and sealed: peek says first {first_seq}, next {next_seq}")


def _entities(client: Client, pname: str) -> None:
    print(f"entities in {pname}:")
    etag = client.put(pname, "alice", b'{"city": "Oslo"}', if_none_match="*")
    value, read_etag = client.get(pname, "alice")
    assert read_etag == etag
    print(f"  put alice -> ETag {etag}; get alice -> {value.decode()} (ETag {read_etag})")
    new_etag = client.put(pname, "alice", b'{"city": "Bergen"}', if_match=etag)
    print(f"  put alice if-match {etag} -> ETag {new_etag}")
    try:
        client.put(pname, "alice", b'{"city": "Lost"}', if_match=etag)
        raise AssertionError("a put with a stale ETag was accepted")
    except PreconditionFailed:
        print(f"  put alice if-match {etag} (stale) -> refused: PreconditionFailed")
    for row in ("carol", "bob", "dave"):
        client.put(pname, row, f'{{"name": "{row}"}}'.encode())
    first = client.scan(start=pname, limit=2)
    rows = [e.row.decode() for e in first]
    rest = client.scan(start=pname, continuation=first.continuation)
    for entity in rest:
        if entity.pname != pname:
            break
        rows.append(entity.row.decode())
    rest.close()
    assert rows == ["alice", "bob", "carol", "dave"], rows
    print(f"  scan: {', '.join(rows[:2])} (limit 2, then its continuation token) + "
          f"{', '.join(rows[2:])}: in key order")


def _shared_access(stamp: LocalStamp, cs: ConnectionString, log: str) -> None:
    with _accounts(stamp) as store:
        key_index = store.get(cs.account).keys.index(cs.key) + 1
    now_s = time.time()
    token = sas.mint(cs.account, key_index, cs.key, {"read"}, log, int(now_s) + 3600,
                     now_s=now_s)
    print(f"a shared access token: read only, names starting with {log}, 1 hour:")
    with _client(cs, sas_token=token) as reader:
        print(f"  read: {len(reader.read(log, 3, 100))} records")
        try:
            reader.append(log, [b"not allowed"])
            raise AssertionError("a read-only token appended")
        except PermissionDenied as exc:
            print(f"  append: refused: PermissionDenied: {exc}")
