"""The default config and TOML overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import default_config, load_config
from common.errors import InvalidArgument


def test_default_stamp_has_9_extent_nodes_in_3_fault_domains() -> None:
    nodes = default_config().extent_nodes
    assert [n.name for n in nodes] == [f"en-{i}" for i in range(1, 10)]
    assert sorted({n.fault_domain for n in nodes}) == ["fd-1", "fd-2", "fd-3"]
    assert len({n.port for n in nodes}) == 9


def test_toml_overrides_limits_and_nodes(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('data_dir = "/srv/x"\n[extent_node]\nextent_bytes_max = 1024\n'
                    '[[extent_nodes]]\nname = "en-1"\nfault_domain = "a"\n'
                    'upgrade_domain = "u"\nport = 0\n')
    config = load_config(path)
    assert config.data_dir == "/srv/x"
    assert config.extent_node.extent_bytes_max == 1024
    assert [n.fault_domain for n in config.extent_nodes] == ["a"]


@pytest.mark.parametrize("text", ["colour = 1\n", "[extent_node]\nspeed = 3\n", "not toml ["])
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgument):
        load_config(path)


def test_partition_manager_section_overrides_the_balancing_defaults(tmp_path: Path) -> None:
    assert default_config().partition_manager.balance_interval_s == 5.0
    assert default_config().partition_manager.policy == \
        "partition_layer.balance_policy.DefaultPolicy"
    path = tmp_path / "c.toml"
    path.write_text("[partition_manager]\nbalance_interval_s = 0\ncooldown_s = 2.5\n"
                    'policy = "my.module.Policy"\n')
    section = load_config(path).partition_manager
    assert (section.balance_interval_s, section.cooldown_s, section.policy) == \
        (0, 2.5, "my.module.Policy")


@pytest.mark.parametrize("text", ["[partition_manager]\nspeed = 3\n",
                                  "[partition_manager]\nbalance_interval_s = -1\n",
                                  '[partition_manager]\npolicy = "NoDots"\n',
                                  "[partition_manager]\nmerge_ops_per_s_max = 1e9\n",
                                  "[partition_manager]\npartitions_per_server_low = 30\n"])
def test_bad_partition_manager_section_is_a_clear_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgument, match="partition_manager"):
        load_config(path)


@pytest.mark.parametrize("text", [
    "[stream_manager]\nraft_heartbeat_interval_ms = 300\nraft_election_timeout_min_ms = 800\n",
    "[stream_manager]\nraft_election_timeout_min_ms = 900\nraft_election_timeout_max_ms = 850\n",
])
def test_stream_manager_raft_timing_is_checked(tmp_path: Path, text: str) -> None:
    path = tmp_path / "stamp.toml"
    path.write_text(text)
    with pytest.raises(InvalidArgument, match="raft_"):
        load_config(path)


def test_stream_manager_raft_timing_reaches_the_replica() -> None:
    from common.config import StreamManagerLimits
    from stream_layer.stream_manager.main import raft_tuning
    tuning = raft_tuning(StreamManagerLimits(raft_heartbeat_interval_ms=200,
                                             raft_election_timeout_min_ms=700,
                                             raft_election_timeout_max_ms=1400))
    assert (tuning.heartbeat_interval_s, tuning.election_timeout_min_s,
            tuning.election_timeout_max_s, tuning.leader_fallback_s) == (0.2, 0.7, 1.4, 1.4)
