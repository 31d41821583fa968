"""One process of a local stamp as `stamp.json` records it (tools/local_stamp.py, which plans
and starts them; tools/local_front_ends.py plans the front ends'): its name, kind, directory,
command line, and what it was found to be once it ran."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ProcessRecord:
    name: str
    kind: str
    dir: str
    argv: list[str]
    address: str = ""
    pid: int = 0
    fault_domain: str = ""
    upgrade_domain: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    metrics_address: str = ""  # host:port of its Prometheus metrics ("": none)
