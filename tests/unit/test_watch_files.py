"""What `stamp up` plans and writes for watching (tools/local_watch.py) and for a stamp on
several hosts (`[hosts]`), and how the CLI's tables read when they are not on a terminal
(tools/tables.py): plain lines, never wrapped."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from common.config import WatchConfig, default_config, load_config
from common.errors import InvalidArgument
from tools import local_watch, tables
from tools.local_stamp import LocalStamp


def _stamp(tmp_path: Path, metrics_enabled: bool = True) -> LocalStamp:
    config = dataclasses.replace(default_config().with_ephemeral_ports(),
                                 watch=WatchConfig(metrics_enabled=metrics_enabled))
    stamp = LocalStamp(tmp_path / "stamp", config)
    stamp.plan()
    stamp.plan_front_ends()
    return stamp


def test_every_process_gets_its_own_metrics_port_once_and_is_in_the_scrape_config(
        tmp_path: Path) -> None:
    stamp = _stamp(tmp_path)
    addresses = {rec.name: rec.metrics_address for rec in stamp.records.values()}
    assert len(addresses) == 3 + 3 + 9 + 2 + 2 + 2 + 2 and all(addresses.values())  # + jobs
    assert len(set(addresses.values())) == len(addresses)
    for rec in stamp.records.values():
        port = rec.metrics_address.rpartition(":")[2]
        assert rec.argv[rec.argv.index("--metrics-port") + 1] == port
    argv = {rec.name: list(rec.argv) for rec in stamp.records.values()}
    local_watch.plan(stamp)  # planned again (a restart, `stamp up` again): nothing changes
    assert {rec.name: rec.argv for rec in stamp.records.values()} == argv
    text = local_watch.scrape_config(stamp)
    for name, address in addresses.items():
        assert f'- targets: ["{address}"]' in text and f"process: {name}" in text
    assert "job_name: extent-node" in text and "scrape_interval: 5s" in text


def test_metrics_off_in_the_config_plans_no_metrics_port(tmp_path: Path) -> None:
    stamp = _stamp(tmp_path, metrics_enabled=False)
    assert all(not rec.metrics_address and "--metrics-port" not in rec.argv
               for rec in stamp.records.values())


def test_a_table_off_a_terminal_is_plain_lines_never_wrapped() -> None:
    out = io.StringIO()
    long_range = "[acct/" + "x" * 300 + ", +inf)"
    tables.console(out).print(tables.table(["ID", "RANGE", "OPS/S"],
                                           [[1, long_range, 2.5], [2, "b", None]],
                                           title="map version 3", right=["OPS/S"]))
    lines = out.getvalue().splitlines()
    assert "\x1b" not in out.getvalue()  # no colour codes in a pipe
    assert lines[0].strip() == "map version 3"
    assert lines[1].split() == ["ID", "RANGE", "OPS/S"]
    assert lines[3].split()[0] == "1" and long_range in lines[3] and lines[3].endswith("2.5")
    assert lines[4].split() == ["2", "b", "-"]


def test_hosts_put_each_process_on_its_host_with_ports_every_host_agrees_on(
        tmp_path: Path) -> None:
    """`[hosts]`: each process binds and is reached on its own host, Raft peers included;
    with the ports fixed in the config, two hosts planning the stamp (each its own data
    directory) agree on every address, metrics ones included."""
    config_path = tmp_path / "hosts.toml"
    config_path.write_text('[hosts]\nlock-1 = "10.0.0.2"\nsm-2 = "10.0.0.3"\nen-4 = "10.0.0.3"\n'
                           'ps-1 = "10.0.0.2"\nfe-2 = "10.0.0.4"\n')
    plans = []
    for host in ("a", "b"):
        stamp = LocalStamp(tmp_path / host, load_config(config_path), str(config_path))
        stamp.plan()
        stamp.plan_front_ends()
        plans.append({r.name: (r.address, r.metrics_address, r.extra)
                      for r in stamp.records.values()})
    assert plans[0] == plans[1]
    plan = plans[0]
    assert plan["lock-1"][0] == "10.0.0.2:7021" and plan["lock-1"][1] == "10.0.0.2:8021"
    assert plan["sm-2"][2]["raft_address"] == "10.0.0.3:7012"
    assert plan["en-4"][0] == "10.0.0.3:7104" and plan["ps-1"][0] == "10.0.0.2:7051"
    assert plan["fe-2"][0] == "10.0.0.4:7062" and plan["en-1"][0] == "127.0.0.1:7101"
    assert stamp.hosts() == ["10.0.0.2", "127.0.0.1", "10.0.0.3", "10.0.0.4"]
    sm_1 = stamp.record("sm-1").argv
    assert "127.0.0.1:7011=127.0.0.1:7001,10.0.0.3:7012=10.0.0.3:7002" in \
        sm_1[sm_1.index("--peers") + 1]


def test_hosts_naming_an_unknown_process_is_a_clear_error(tmp_path: Path) -> None:
    config_path = tmp_path / "hosts.toml"
    config_path.write_text('[hosts]\nen-99 = "10.0.0.2"\n')
    with pytest.raises(InvalidArgument, match="en-99"):
        load_config(config_path)


def test_up_only_a_host_the_stamp_does_not_have_starts_nothing(tmp_path: Path) -> None:
    stamp = LocalStamp(tmp_path / "stamp", default_config().with_ephemeral_ports())
    with pytest.raises(InvalidArgument, match=r"10\.9\.9\.9"):
        stamp.up(only="10.9.9.9")
    assert not stamp.records and not (tmp_path / "stamp").exists()


def test_overall_ratio_is_the_geometric_mean_of_the_loads() -> None:
    from tools.bench.metrics_cost import overall

    rows = [{"params": {}, "metrics": {"ratio": 0.5, "cpu_ratio": 1.0}},
            {"params": {}, "metrics": {"records_per_s": 10.0}},
            {"params": {}, "metrics": {"ratio": 2.0, "cpu_ratio": 1.0}}]
    assert overall(rows)["metrics"] == {"ratio": 1.0, "cpu_ratio": 1.0}
