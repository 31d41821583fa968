"""`stamp bench spark-scan` (issue 18): entities/s and log records/s read through the Spark
data source (spark/datasource.py) on local[2], beside the SDK reading the same data in the
same run, taking turns; the ratio data source / SDK (target >= 0.5 after Spark's start-up,
which is reported apart: the session and its first data source read, once).

The data: `rows` entities of SCAN_VALUE_BYTES over 4 range partitions (tools/bench/
front_end.py's scan stamp) and as many log records of the same size over LOGS logs, one in
each range partition. The SDK path is one blocking client, as a user reads: a scan of the
whole account, and the logs read one after the other. The Spark path sums the length of every
value (or record), so every byte crosses into Spark, not only a count.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from stampsdk import Client

from partition_layer.client import AsyncPartitionClient
from tools.bench.fresh_stamp import with_fresh_stamp
from tools.bench.front_end import (
    ADMIN_FILE,
    SCAN_PARTITIONS,
    SCAN_PNAMES,
    SCAN_VALUE_BYTES,
    _direct,
    _load,
    pname_of,
    scan_config,
)
from tools.bench.measure import row
from tools.local_stamp import LocalStamp

Progress = Callable[[str], None]
SPARK_SCAN_ROWS = 200_000  # default --rows: entities, and as many log records
MASTER = "local[2]"
# One log in each range partition (the partitions are cut at pname_of(i * SCAN_PNAMES / 4)).
LOGS = tuple(f"{pname_of(i * SCAN_PNAMES // SCAN_PARTITIONS + 1)}-log"
             for i in range(SCAN_PARTITIONS))
APPEND_RECORDS = 1000
READ_RECORDS = 10_000


def run_spark_scan(rows: int = SPARK_SCAN_ROWS, trials: int = 3,
                   progress: Progress = lambda _: None) -> list[dict[str, Any]]:
    return with_fresh_stamp(scan_config(), lambda stamp: _bench(stamp, rows, trials, progress),
                            progress, stream_layer_only=False)


def _bench(stamp: LocalStamp, total: int, trials: int, progress: Progress
           ) -> list[dict[str, Any]]:
    cs = (stamp.data_dir / ADMIN_FILE).read_text().strip()
    asyncio.run(_fill(stamp, Client.from_connection_string(cs).account, total, progress))
    from spark.datasource import register
    from spark.session import spark_session

    progress(f"starting Spark on {MASTER}")
    started = time.perf_counter()
    session = spark_session(MASTER, app_name="stamp-bench-spark-scan")
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    # The start-up: the JVM, and a first data source read (of a log never written: nothing)
    # that starts Spark's Python workers for planning and for tasks.
    empty = (session.read.format("stamp").option("connectionString", cs)
             .option("log", "never-written-log").load())
    if empty.count() != 0:
        raise AssertionError("a log never written has records")
    startup_s = time.perf_counter() - started
    try:
        rates: dict[tuple[str, str], list[float]] = {}
        with Client.from_connection_string(cs) as client:
            for trial in range(trials):
                for data, path, measure in (
                        ("entities", "sdk", lambda: _sdk_entities(client)),
                        ("entities", "spark", lambda: _spark_entities(session, cs)),
                        ("logs", "sdk", lambda: _sdk_logs(client)),
                        ("logs", "spark", lambda: _spark_logs(session, cs))):
                    began = time.perf_counter()
                    count, nbytes = measure()
                    elapsed = time.perf_counter() - began
                    if (count, nbytes) != (total, total * SCAN_VALUE_BYTES):
                        raise AssertionError(f"{path} read {count} {data} of {nbytes} bytes, "
                                             f"not {total} of {total * SCAN_VALUE_BYTES}")
                    rates.setdefault((data, path), []).append(count / elapsed)
                    progress(f"turn {trial + 1}/{trials}: {path} read {count:,} {data} in "
                             f"{elapsed:.2f} s")
    finally:
        session.stop()
    return _rows(rates, total, trials, startup_s)


def _rows(rates: dict[tuple[str, str], list[float]], total: int, trials: int,
          startup_s: float) -> list[dict[str, Any]]:
    out = [row({"path": "spark", "master": MASTER, "phase": "start-up"},
               {"seconds": round(startup_s, 2)})]
    for data, metric in (("entities", "entities_per_s"), ("logs", "records_per_s")):
        medians = {path: statistics.median(rates[(data, path)]) for path in ("sdk", "spark")}
        for path, rate in medians.items():
            out.append(row({"path": path, "data": data, "rows": total,
                            "value_bytes": SCAN_VALUE_BYTES, "partitions": SCAN_PARTITIONS,
                            "trials": trials}, {metric: round(rate)}))
        out.append(row({"compare": f"spark vs sdk, {data}"},
                       {"ratio": round(medians["spark"] / medians["sdk"], 3)}))
    return out


async def _fill(stamp: LocalStamp, account: str, total: int, progress: Progress) -> None:
    """`total` entities (front_end._load) and `total` log records over LOGS (loading is not
    what is measured: through the partition client)."""
    direct: AsyncPartitionClient = _direct(stamp)
    try:
        progress(f"loading {total:,} entities and {total:,} log records of "
                 f"{SCAN_VALUE_BYTES} bytes over {SCAN_PARTITIONS} range partitions")
        await _load(direct, account, total, progress)
        value = os.urandom(SCAN_VALUE_BYTES)

        async def fill_log(index: int) -> None:
            count = total // len(LOGS) + (1 if index < total % len(LOGS) else 0)
            for start in range(0, count, APPEND_RECORDS):
                await direct.append(account, LOGS[index],
                                    [value] * min(APPEND_RECORDS, count - start))
        await asyncio.gather(*(fill_log(i) for i in range(len(LOGS))))
    finally:
        await direct.close()


def _sdk_entities(client: Client) -> tuple[int, int]:
    count = nbytes = 0
    for page in client.scan().pages():
        count += len(page.items)
        nbytes += sum(len(e.value) for e in page.items)
    return count, nbytes


def _sdk_logs(client: Client) -> tuple[int, int]:
    count = nbytes = 0
    for log in LOGS:
        seq, end = client.peek(log)
        while seq < end:
            records = client.read(log, seq, READ_RECORDS)
            count += len(records)
            nbytes += sum(len(data) for _, data in records)
            seq = records[-1][0] + 1
    return count, nbytes


def _spark_entities(session: Any, cs: str) -> tuple[int, int]:
    df = session.read.format("stamp").option("connectionString", cs).load()
    return _count_and_bytes(df, "value")


def _spark_logs(session: Any, cs: str) -> tuple[int, int]:
    df = (session.read.format("stamp").option("connectionString", cs)
          .option("log", ",".join(LOGS)).load())
    return _count_and_bytes(df, "data")


def _count_and_bytes(df: Any, column: str) -> tuple[int, int]:
    from pyspark.sql import functions as F

    result = df.agg(F.count("*").alias("n"), F.sum(F.length(column)).alias("b")).collect()[0]
    return int(result["n"]), int(result["b"] or 0)
