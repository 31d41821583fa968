"""A front end is the stamp's public door: it serves the Faults service (which arms fault
points — crash, delay, flip — and cuts the network, checking no credentials) only when
started with --faults-rpc, as a local stamp's front ends are (tools/local_front_ends.py).
Real processes: front ends started by hand, pointed at ports nothing listens on (a front
end starts without its partition managers and lock service; nothing here needs them)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest

from common import process
from common.proto import faults_pb2, faults_pb2_grpc
from common.rpc import sync_channel

NOWHERE = "127.0.0.1:1"


def start_front_end(root: Path, name: str, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    proc_dir = root / name
    argv = process.stamp_command("serve", "front-end", "--name", name, "--dir", str(proc_dir),
                                 "--port", "0", "--pm", NOWHERE, "--lock", NOWHERE, *extra)
    popen = process.spawn(argv, proc_dir)
    return popen, process.wait_ready(proc_dir, popen.pid, 60, popen).address


def arm(address: str) -> grpc.StatusCode | None:
    """The status of asking the server at `address` to arm a (harmless) fault point."""
    with sync_channel(address, 4 * 1024 * 1024) as channel:
        try:
            faults_pb2_grpc.FaultsStub(channel).Arm(
                faults_pb2.ArmRequest(spec="fe.none=delay:1,times=1"), timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return None


@pytest.mark.parametrize("flag, expected", [((), grpc.StatusCode.UNIMPLEMENTED),
                                            (("--faults-rpc",), None)])
def test_the_faults_service_only_when_asked(tmp_path: Path, flag: tuple[str, ...],
                                            expected: grpc.StatusCode | None) -> None:
    popen, address = start_front_end(tmp_path, "fe-9", *flag)
    try:
        assert arm(address) == expected
    finally:
        process.kill(popen.pid)
        popen.wait(10)
