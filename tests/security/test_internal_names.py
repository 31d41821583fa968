"""Issue 28, item 7: the stamp's own partition names — the Azure Blob endpoint's groups
`$containers` and `$c/CONTAINER/GEN` — are never reachable through the public gRPC API, with
any credential: not by naming them (frontend/names.py), not by a scan of the whole account
with the account's key or with a token whose prefix is empty (frontend/scan.py cuts every
scan to the public names). The blob endpoint, which keeps its containers there, goes on
working: it reaches them through the front end's forwarding client, not the public checks.

Pure here; against a real front end (sharing that module's stamp):
test_blob_endpoint.test_no_credential_reaches_the_blob_endpoints_groups."""

from __future__ import annotations

import pytest

from common.errors import InvalidArgument
from common.proto import frontend_pb2 as fe_pb
from frontend import names, sas
from frontend.scan import request_range
from partition_layer import keys


def test_a_scan_range_never_covers_an_internal_name() -> None:
    """Pure: whatever bounds a request names, its range starts above every '$' name."""
    internal = keys.encode_key("acct", "$containers", keys.KIND_ENTITY, b"hidden")
    for request in (fe_pb.ScanRequest(account="acct"),
                    fe_pb.ScanRequest(account="acct", start_pname="$containers"),
                    fe_pb.ScanRequest(account="acct", start_pname="$", has_end=True,
                                      end_pname="%")):
        start, end = request_range(request, "")
        assert not start <= internal < end
    assert names.is_internal("$c/x/0") and not sas.covers("", "$containers")


@pytest.mark.parametrize("name", ["$containers", "$c/logs/0011223344556677", "$x"])
def test_an_internal_name_is_refused_as_the_stamps_own(name: str) -> None:
    with pytest.raises(InvalidArgument, match="the stamp's own"):
        names.check_partition(name)
    assert not sas.covers("", name)
