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
