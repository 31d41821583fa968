"""`stamp bench curp`'s pure parts (tools/bench/curp.py): the fast path's share and the
witnesses' bytes per write from before/after scrapes, the rows' shape and metric names
(DESIGN §12: the unit last), and the CLI's `curp` with its --help text and --seconds."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest

from tools.bench.curp import LOADS, SIDES, CurpCounts, Load, load_rows
from tools.scrape import parse


def fe_page(fast: int, synced: int, acked: int, failed: int, in_doubt: int,
            records: int) -> str:
    """A front end's CURP counters as fe_main.watch_curp exposes them."""
    lines = ["# TYPE stamp_fe_curp_writes counter"]
    for answer, value in (("fast", fast), ("synced", synced), ("fallback_acked", acked),
                          ("fallback_failed", failed), ("in_doubt", in_doubt)):
        lines.append(f'stamp_fe_curp_writes_total{{answer="{answer}"}} {value}.0')
    lines += ["# TYPE stamp_fe_curp_records counter", f"stamp_fe_curp_records_total {records}.0"]
    return "\n".join(lines) + "\n"


def en_page(written: int) -> str:
    """An extent node's witness journal counter (extent_node/main.watch_store)."""
    return ("# TYPE stamp_en_witness_journal_written_bytes counter\n"
            f"stamp_en_witness_journal_written_bytes_total {written}.0\n"
            "# TYPE stamp_en_witness_journal_bytes gauge\n"
            "stamp_en_witness_journal_bytes 99999.0\n")


def snapshot(fe_pages: list[str], en_pages: list[str]) -> CurpCounts:
    counts = CurpCounts()
    for page in (*fe_pages, *en_pages):
        counts.add_samples(parse(page))
    return counts


def test_fast_share_and_witness_bytes_per_write_are_deltas_over_the_load() -> None:
    before = snapshot([fe_page(10, 5, 3, 1, 0, 30), fe_page(0, 0, 0, 0, 0, 0)],
                      [en_page(1000)] * 9)
    # Two front ends: 70 fast, 15 synced, 12 acked after a sync, 3 failed, 1 in doubt more.
    after = snapshot([fe_page(50, 15, 10, 2, 1, 200), fe_page(30, 5, 5, 2, 0, 100)],
                     [en_page(1000 + 600)] * 9)
    load = CurpCounts()
    load.add(after, before)
    assert (load.fast, load.synced, load.fallback_acked, load.fallback_failed,
            load.in_doubt) == (70, 15, 12, 3, 1)
    assert load.records_sent == 270
    assert load.witness_written_bytes == 9 * 600  # the held-bytes gauge is not counted
    # In doubt is not an answer: 70 of 70 + 15 + 12 + 3.
    assert load.fast_share() == pytest.approx(0.7)
    # Of all 100 writes of the load, 70 fast (the others: the plain path, uncounted).
    assert load.metrics(writes=100) == {"fast_share_ratio": 0.7, "fast_per_write_ratio": 0.7,
                                        "witness_bytes_per_write": 54.0,
                                        "witness_records_per_write": 2.7}


def test_a_stamp_with_curp_off_or_no_writes_divides_nothing_by_zero() -> None:
    still = snapshot([fe_page(0, 0, 0, 0, 0, 0)] * 2, [en_page(0)] * 9)
    load = CurpCounts()
    load.add(still, still)
    assert load.fast_share() == 0.0
    assert load.metrics(writes=0) == {"fast_share_ratio": 0.0, "fast_per_write_ratio": 0.0,
                                      "witness_bytes_per_write": 0.0,
                                      "witness_records_per_write": 0.0}
    # A process that did not answer its scrape (None, tools/scrape.py) adds nothing.
    assert snapshot([], []) == CurpCounts()


UNIT = re.compile(r"(_per_s|_ms|^ratio|_ratio|_bytes_per_write|_records_per_write)$")


def rows_of(load: Load) -> list[dict[str, Any]]:
    """Two turns a side: 500 writes on, 250 off (Phase: records, latencies, seconds)."""
    b = load.batch
    found = {"on": [(300 * b, [0.001] * 300, 1.0), (200 * b, [0.003] * 200, 1.0)],
             "off": [(100 * b, [0.004] * 100, 1.0), (150 * b, [0.006] * 150, 1.0)]}
    counts = {"on": CurpCounts(fast=400, synced=100, records_sent=1500,
                               witness_written_bytes=500 * 130),
              "off": CurpCounts()}
    return load_rows(load, found, counts)


@pytest.mark.parametrize("load", LOADS, ids=[load.name for load in LOADS])
def test_rows_per_load_one_per_side_then_the_compare_row(load: Load) -> None:
    rows = rows_of(load)
    assert [r["params"].get("curp") for r in rows] == [*SIDES, None]
    for r in rows:
        assert set(r) == {"params", "metrics"}
        for name in r["metrics"]:
            assert UNIT.search(name), f"{name}: no unit last (DESIGN §12)"
    on, off, compare = (r["metrics"] for r in rows)
    rate = "ops_per_s" if load.op == "put" else "records_per_s"
    assert set(on) == set(off) == {rate, "p50_ms", "p99_ms", "fast_share_ratio",
                                   "fast_per_write_ratio", "witness_bytes_per_write",
                                   "witness_records_per_write"}
    assert on[rate] == 250.0 * load.batch and off[rate] == 125.0 * load.batch
    assert (on["fast_share_ratio"], on["fast_per_write_ratio"], on["witness_bytes_per_write"],
            on["witness_records_per_write"]) == (0.8, 0.8, 130.0, 3.0)
    assert off["fast_share_ratio"] == 0.0
    assert rows[0]["params"] == {"curp": "on", "load": load.name, "op": load.op,
                                 "clients": load.clients, "batch": load.batch,
                                 "logs": load.logs, "value_bytes": 1024, "turns": 2}
    assert compare == {"ratio": 2.0, "added_p50_ms": on["p50_ms"] - off["p50_ms"],
                       "added_p99_ms": on["p99_ms"] - off["p99_ms"],
                       "fast_share_ratio": 0.8}
    assert compare["added_p50_ms"] == pytest.approx(1.0 - 6.0)  # nearest-rank p50s
    assert rows[2]["params"] == {"compare": f"CURP on vs off, {load.name}"}


def test_the_loads_are_the_issue_s() -> None:
    assert [(load.op, load.clients, load.batch, load.logs) for load in LOADS] == [
        ("append", 1, 1, 64), ("put", 1, 1, 0), ("append", 1, 1, 1),
        ("append", 32, 1, 1), ("append", 32, 100, 1)]


def test_the_cli_registers_curp_with_its_help_and_its_own_seconds(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tools import cli, cmd_bench
    from tools.bench import curp

    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--help"])
    out, _ = capsys.readouterr()
    assert exit_.value.code == 0
    assert "curp: CURP on and off" in " ".join(out.split())
    assert "curp" in cmd_bench.BENCHES

    asked: list[float] = []

    def fake(seconds: float, progress: Any) -> list[dict[str, Any]]:
        asked.append(seconds)
        return []
    monkeypatch.setattr(curp, "run_curp", fake)
    handler = cmd_bench.BENCHES["curp"][1]
    handler(argparse.Namespace(seconds=None), lambda _: None)  # type: ignore[arg-type]
    handler(argparse.Namespace(seconds=2.0), lambda _: None)  # type: ignore[arg-type]
    assert asked == [curp.SECONDS_DEFAULT, 2.0]
    assert cmd_bench._seconds(argparse.Namespace(seconds=None)) == 5.0  # the others' default
