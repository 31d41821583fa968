"""The pure cores of the Azure Blob endpoint: Append Block decisions, ranges, ETags, the
offset index's keys (frontend/blob_model.py), and Shared Key / SAS signing checked against
the official SDK's own signer (frontend/blob_auth.py)."""

from __future__ import annotations

import base64
import functools
import xml.etree.ElementTree as ElementTree
from datetime import UTC, datetime, timedelta

import pytest
from azure.storage.blob import BlobSasPermissions, generate_blob_sas
from azure.storage.blob._shared.authentication import _storage_header_sort
from hypothesis import given
from hypothesis import strategies as st

from frontend import blob_auth, blob_xml
from frontend import blob_model as model
from frontend.blob_handlers import CONTENT_HEADERS
from frontend.blob_model import BlobError, Conditions, Props

KEY = b"k" * 32
CONTENT = CONTENT_HEADERS.values()


def props(length: int = 0, **changes: object) -> Props:
    base = Props(gen="00" * 8, created_ms=1, modified_ms=1, length=length)
    return Props(**{**base.__dict__, **changes})  # type: ignore[arg-type]


def decide(p: Props, size: int, conds: Conditions, crc: int = 7) -> model.Dedup | model.Write:
    return model.decide_append(p, '"5"', size, crc, conds, now_ms=9, appends_max=3)


def test_an_append_grows_the_blob_and_remembers_itself() -> None:
    decision = decide(props(6, appends=1), 4, Conditions(appendpos=6, maxsize=10))
    assert isinstance(decision, model.Write) and decision.offset == 6
    assert (decision.props.length, decision.props.appends) == (10, 2)
    assert decision.props.last == (6, 4, 7) and decision.props.modified_ms == 9


@pytest.mark.parametrize(("blob", "conds", "code"), [
    (props(6), Conditions(appendpos=5), "AppendPositionConditionNotMet"),
    (props(6), Conditions(maxsize=9), "MaxBlobSizeConditionNotMet"),
    (props(6, sealed=True), Conditions(), "BlobIsSealed"),
    (props(6, appends=3), Conditions(), "BlockCountExceedsLimit"),
    (props(6), Conditions(if_match='"0x6"'), "ConditionNotMet"),
    (props(6), Conditions(if_none_match="*"), "ConditionNotMet"),
    (props(6, modified_ms=5000), Conditions(if_unmodified_since_s=4), "ConditionNotMet"),
    (props(6, modified_ms=5000), Conditions(if_modified_since_s=5), "ConditionNotMet"),
])
def test_refusals(blob: Props, conds: Conditions, code: str) -> None:
    with pytest.raises(BlobError) as refused:
        decide(blob, 4, conds)
    assert refused.value.code == code


def test_a_retry_of_the_last_append_is_answered_as_done_only_if_it_is_that_append() -> None:
    blob = props(10, appends=2, last=(6, 4, 7))
    assert decide(blob, 4, Conditions(appendpos=6)) == model.Dedup(6)
    with pytest.raises(BlobError):  # other bytes at that position: refused as before
        decide(blob, 4, Conditions(appendpos=6), crc=8)
    with pytest.raises(BlobError):
        decide(blob, 3, Conditions(appendpos=6))
    assert isinstance(decide(blob, 4, Conditions()), model.Write)  # no position: appended


def test_dates_have_whole_seconds() -> None:
    decide(props(6, modified_ms=5999), 4, Conditions(if_unmodified_since_s=5))
    decide(props(6, modified_ms=5999), 4, Conditions(if_modified_since_s=4))


def test_etags_round_trip_and_match_if_match() -> None:
    assert model.http_etag('"1a2b"') == '"0x1A2B"'
    assert model.row_etag('"0x1A2B"') == '"1a2b"' and model.row_etag("garbage") == ""
    model.check_etag_conditions(Conditions(if_match='"0x1A2B"'), '"1a2b"', read=False)
    with pytest.raises(BlobError) as not_modified:
        model.check_etag_conditions(Conditions(if_none_match='"0x1A2B"'), '"1a2b"', read=True)
    assert not_modified.value.status == 304


@pytest.mark.parametrize(("text", "size", "expected"), [
    (None, 10, None), ("bytes=0-", 10, (0, 10)), ("bytes=2-4", 10, (2, 5)),
    ("bytes=8-100", 10, (8, 10)), ("bytes=-3", 10, (7, 10)), ("items=0-1", 10, None),
])
def test_ranges(text: str | None, size: int, expected: tuple[int, int] | None) -> None:
    assert model.parse_range(text, size) == expected


@pytest.mark.parametrize(("text", "size"), [("bytes=10-", 10), ("bytes=0-", 0)])
def test_a_range_past_the_end_is_416(text: str, size: int) -> None:
    with pytest.raises(BlobError) as refused:
        model.parse_range(text, size)
    assert refused.value.status == 416 and refused.value.headers["Content-Range"] == \
        f"bytes */{size}"


@given(st.binary(min_size=1, max_size=300), st.integers(0, 1 << 40), st.integers(1, 64))
def test_records_cover_the_block_and_sort_by_offset(block: bytes, offset: int,
                                                    record: int) -> None:
    records = model.records_of(block, offset, record)
    assert b"".join(data for _, data in records) == block
    assert records[-1][0] == offset + len(block)
    rows = [model.data_row("name", "ab" * 8, end) for end, _ in records]
    assert rows == sorted(rows) and all(len(d) <= record for _, d in records)
    assert [model.end_of_data_row(r) for r in rows] == [end for end, _ in records]


HEADER_NAMES = st.lists(st.from_regex(r"x-ms-[a-z0-9-]{1,12}", fullmatch=True),
                        min_size=1, max_size=8, unique=True)


@given(HEADER_NAMES)
def test_canonical_header_order_is_the_sdks(names: list[str]) -> None:
    ours = sorted(names, key=functools.cmp_to_key(blob_auth.compare_header_names))
    assert ours == [name for name, _ in _storage_header_sort([(n, "") for n in names])]
    assert blob_auth.canonical_order(tuple(names)) == tuple(ours)  # remembered: the same


def test_shared_key_string_to_sign_doubles_the_account_in_path_style_urls() -> None:
    headers = {"x-ms-date": "Wed, 25 Nov 2026 20:00:00 GMT", "x-ms-version": "2026-10-06",
               "content-length": "0", "x-ms-blob-condition-appendpos": "6"}
    text = blob_auth.string_to_sign("PUT", headers, "acct", "/acct/logs/a%20b",
                                    [("comp", "appendblock")])
    assert text.endswith("x-ms-blob-condition-appendpos:6\nx-ms-date:Wed, 25 Nov 2026 "
                         "20:00:00 GMT\nx-ms-version:2026-10-06\n/acct/acct/logs/a%20b"
                         "\ncomp:appendblock")
    assert text.startswith("PUT\n\n\n\n")  # Content-Length 0 is signed as empty
    signature = blob_auth.sign(KEY, text)
    now = datetime(2026, 11, 25, 20, 0, 30, tzinfo=UTC)
    blob_auth.check_shared_key(f"SharedKey acct:{signature}", [b"x" * 32, KEY], "acct",
                               "PUT", headers, "/acct/logs/a%20b", [("comp", "appendblock")],
                               now, 900)
    with pytest.raises(BlobError) as tampered:
        blob_auth.check_shared_key(f"SharedKey acct:{signature}", [KEY], "acct", "PUT",
                                   {**headers, "x-ms-blob-condition-appendpos": "7"},
                                   "/acct/logs/a%20b", [("comp", "appendblock")], now, 900)
    assert tampered.value.code == "AuthenticationFailed"
    with pytest.raises(BlobError):  # an hour late
        blob_auth.check_shared_key(f"SharedKey acct:{signature}", [KEY], "acct", "PUT",
                                   headers, "/acct/logs/a%20b", [("comp", "appendblock")],
                                   now + timedelta(hours=1), 900)


def test_a_service_sas_made_by_the_sdk_is_accepted_until_it_expires() -> None:
    expiry = datetime(2026, 11, 25, 21, 0, tzinfo=UTC)
    token = generate_blob_sas("acct", "logs", "a b", account_key=base64.b64encode(KEY).decode(),
                              permission=BlobSasPermissions(read=True), expiry=expiry)
    from urllib.parse import parse_qsl

    params = dict(parse_qsl(token))
    before = expiry - timedelta(minutes=1)
    blob_auth.check_sas(params, [KEY], "acct", "logs", "a b", "r", before, "127.0.0.1", False)
    for account, blob, permission, when in (("other", "a b", "r", before),
                                            ("acct", "a c", "r", before),
                                            ("acct", "a b", "r", expiry),
                                            ("acct", "a b", "w", before)):
        with pytest.raises(BlobError) as refused:
            blob_auth.check_sas(params, [KEY], account, "logs", blob, permission, when,
                                "127.0.0.1", False)
        assert refused.value.status == 403


@pytest.mark.parametrize("last", [None, (6, 4, 7)])
def test_properties_and_containers_round_trip(last: tuple[int, int, int] | None) -> None:
    blob = Props("ab" * 8, 1, 2, 10, 2, True, {"k": "v"}, {"Content-Type": "text/plain"}, last)
    assert Props.decode(blob.encode()) == blob
    container = model.Container("cd" * 8, 5, {"owner": "x"}, deleted_ms=9)
    assert model.Container.decode(container.encode()) == container


@given(st.text(), st.text(), st.dictionaries(st.text(), st.text(), max_size=4),
       st.dictionaries(st.sampled_from(list(CONTENT)), st.text(), max_size=3))
def test_list_xml_is_well_formed_whatever_it_is_given(name: str, prefix: str,
                                                      metadata: dict[str, str],
                                                      content: dict[str, str]) -> None:
    """Stored names and values from before the checks (or any bug past them) can never
    break a listing: every body parses, and metadata names that are C# identifiers show."""
    blob = props(metadata=metadata, content=content)
    listed = blob_xml.blobs("http://h/a/", "c", prefix, name, 5, "/", [(name, blob, '"1"'),
                                                                    prefix], name, True)
    root = ElementTree.fromstring(listed)
    shown = {child.tag for meta in root.iter("Metadata") for child in meta}
    assert shown == {k for k in metadata if model.METADATA_NAME.fullmatch(k)}
    containers = blob_xml.containers("http://h/a/", prefix, name, 5,
                                     [(name, model.Container("00", 1, metadata), '"1"')],
                                     name, True)
    ElementTree.fromstring(containers)
    ElementTree.fromstring(blob_xml.error("Code", name, "id", "t"))


@given(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4))
def test_metadata_azure_takes_is_what_xml_and_headers_can_carry(metadata: dict[str, str]
                                                                ) -> None:
    try:
        model.check_metadata(metadata)
    except BlobError as exc:
        assert exc.status == 400 and exc.code == "InvalidMetadata"
        return
    for key, value in metadata.items():
        ElementTree.fromstring(f"<{key}>{blob_xml.escape(value)}</{key}>")
        assert value.isascii() and key.isidentifier()
