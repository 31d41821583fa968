"""The Grafana dashboard `stamp up` writes (tools/dashboard.py, issue 31): well formed; that its
metrics exist is checked against a running stamp in tests/probe/test_watch.py."""

from __future__ import annotations

import json
from pathlib import Path

from tools import dashboard


def test_the_dashboard_is_grafana_json_with_unique_ids_and_no_overlaps(tmp_path: Path) -> None:
    board = json.loads(dashboard.write_dashboard(tmp_path).read_text())
    assert board == dashboard.dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & mine, panel["title"]
        cells |= mine
    exprs = dashboard.queries(board)
    assert exprs and all(e.count("(") == e.count(")") for e in exprs)
    assert all(t["datasource"]["uid"] == "${datasource}" for p in board["panels"]
               for t in p.get("targets", ()))


def test_metric_names_are_read_out_of_queries() -> None:
    exprs = ['histogram_quantile(0.99, sum by (le) (rate(stamp_ps_op_seconds_bucket[1m])))',
             'sum by (job) (rate(process_cpu_seconds_total[1m])) + stamp_en_bytes']
    assert dashboard.metric_names(exprs) == {
        "stamp_ps_op_seconds_bucket", "process_cpu_seconds_total", "stamp_en_bytes"}


def test_the_extent_nodes_row_shows_the_witness_beside_the_journal() -> None:
    rows = dict(dashboard.PANELS)
    names = dashboard.metric_names(expr for _, _, queries in rows["Extent nodes"]
                                   for expr, _ in queries)
    assert {"stamp_en_journal_bytes", "stamp_en_witness_bytes",
            "stamp_en_witness_records"} <= names
