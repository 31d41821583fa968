"""The job scheduler process: `stamp serve job-scheduler --name jobs-1 --dir DIR --port P
--lock ADDRS --sm ADDRS --data-dir STAMP_DIR [--config FILE]`. Run two or more; the one holding the
lease `jobs/scheduler` runs the maintenance jobs on their schedules (spark/scheduler.py),
the others stand by. Its gRPC port serves the health service (SERVING while the lock
service answers it) and, with `--faults-rpc`, the Faults service; its metrics port the
scheduler's gauges (`stamp_job_*`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily, Metric

from common import metrics, rpc, server_main
from common.config import HOST, load_config
from common.process import write_ready
from lock_service.client import LockClient
from spark.scheduler import JobScheduler

log = logging.getLogger("stamp.job_scheduler")

RPC_MESSAGE_BYTES_MAX = 4 * 1024 * 1024


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="stamp serve job-scheduler",
                                description="Run one job scheduler (active or standby).")
    p.add_argument("--name", required=True, help="process name, e.g. jobs-1")
    p.add_argument("--dir", required=True, type=Path, help="its directory (log, ready file)")
    p.add_argument("--host", default=HOST)
    p.add_argument("--port", type=int, default=0, help="gRPC port (0: pick a free one)")
    p.add_argument("--lock", required=True, help="lock service addresses, comma-separated")
    p.add_argument("--sm", required=True, help="stream manager addresses, comma-separated")
    p.add_argument("--data-dir", required=True,
                   help="the stamp's data directory (its stamp.json: the jobs find the "
                        "stamp's processes there, as `stamp job` does)")
    p.add_argument("--config", help="stamp config file (TOML)")
    server_main.add_watch_args(p)
    server_main.add_security_args(p)
    return p


def watch_scheduler(scheduler: JobScheduler) -> Iterable[Metric]:
    """Scrape-time gauges: whether it is active, and each job's times, outcome, backlog."""
    yield GaugeMetricFamily("stamp_job_scheduler_active", "1 while this scheduler holds "
                            "the lease and runs the jobs", value=1 if scheduler.is_active()
                            else 0)
    for name, doc, by_job in scheduler.gauges():
        family = GaugeMetricFamily(name, doc, labels=["job"])
        for job, value in by_job.items():
            family.add_metric([job], value)
        yield family


async def serve(args: argparse.Namespace) -> None:
    config = load_config(args.config)
    watch = await server_main.Watch.begin(args)
    locks = LockClient([a for a in args.lock.split(",") if a], holder=args.name)
    server = rpc.aio_server(RPC_MESSAGE_BYTES_MAX)
    port = rpc.add_port(server, f"{args.host}:{args.port}")
    address = f"{args.host}:{port}"
    scheduler = JobScheduler(args.name, address, str(Path(args.data_dir).resolve()), locks,
                             [a for a in args.sm.split(",") if a], config, args.dir / "runs")
    server_main.serve_faults(server, args)
    await watch.attach(server)
    metrics.on_scrape(lambda: watch_scheduler(scheduler))
    await server.start()
    watch.healthy_when(scheduler.check)
    loop = asyncio.get_running_loop()
    runner = loop.create_task(scheduler.run_forever())
    write_ready(args.dir, args.name, address)
    log.info("%s serving on %s", args.name, address)

    await server_main.until_stopped()
    log.info("%s stopping", args.name)
    await watch.end()
    # A run going is ended (its claim closed) and the lease released.
    await asyncio.to_thread(scheduler.close)
    runner.cancel()
    await server.stop(grace=1.0)
    await asyncio.to_thread(locks.close)


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    server_main.start_process(args.name, args.dir, security=args)
    server_main.run(serve(args))


if __name__ == "__main__":
    main()
