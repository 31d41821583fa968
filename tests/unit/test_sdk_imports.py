"""The SDK is a distribution of its own (issue 31): importing it loads no module of the
server, no server package imports it (tools/ and spark/ are clients: they may), and its copy
of the public protocol's code is the server's, descriptor for descriptor, so both load in
one process."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import stampsdk
from stampsdk._proto import frontend_v1_pb2 as sdk_v1
from stampsdk._proto import location_v1_pb2 as sdk_location

from common.proto import frontend_v1_pb2 as server_v1
from common.proto import location_v1_pb2 as server_location

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = ("common", "frontend", "partition_layer", "stream_layer", "extent_node",
                   "lock_service", "erasure", "location")
CLIENT_PACKAGES = ("spark", "tools", "tests")


def sdk_modules() -> list[str]:
    """Every module of the SDK, by name."""
    return ["stampsdk", *(m.name for m in pkgutil.walk_packages(stampsdk.__path__,
                                                                "stampsdk."))]


def test_importing_the_sdk_loads_nothing_of_the_server() -> None:
    # A fresh interpreter, outside the repository (so nothing of it is on sys.path but
    # what is installed), imports every module of the SDK and lists what got loaded.
    script = ("import importlib, json, sys\n"
              f"for name in {sdk_modules()!r}:\n"
              "    importlib.import_module(name)\n"
              "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", script], cwd="/", capture_output=True,
                         text=True, check=True).stdout
    loaded = json.loads(out)
    server = [m for m in loaded
              if m.split(".")[0] in SERVER_PACKAGES + CLIENT_PACKAGES]
    assert server == []
    assert "stampsdk.aio" in loaded and "stampsdk.client" in loaded


def test_no_server_package_imports_the_sdk() -> None:
    offenders = []
    for package in SERVER_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom)
                         else [])
                offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names
                              if n.split(".")[0] == "stampsdk"]
    assert offenders == []


def test_the_sdk_protocol_code_is_the_servers_and_both_load_in_one_process() -> None:
    """Each .proto of protocol/ (frontend_v1, location_v1), generated twice (the SDK's with
    older grpcio-tools): the same file descriptor, so the default pool takes both; a stale
    SDK copy (`make sdk-proto`) fails here."""
    assert sdk_v1.DESCRIPTOR.name == server_v1.DESCRIPTOR.name == "frontend_v1.proto"
    assert sdk_v1.DESCRIPTOR.serialized_pb == server_v1.DESCRIPTOR.serialized_pb
    assert sdk_location.DESCRIPTOR.name == server_location.DESCRIPTOR.name \
        == "location_v1.proto"
    assert sdk_location.DESCRIPTOR.serialized_pb == server_location.DESCRIPTOR.serialized_pb
    request = sdk_v1.Request(account="acct", pname="log", append=sdk_v1.AppendOp(
        records=[b"r"], crcs=[1]))
    assert server_v1.Request.FromString(request.SerializeToString()) == \
        server_v1.Request(account="acct", pname="log",
                          append=server_v1.AppendOp(records=[b"r"], crcs=[1]))
