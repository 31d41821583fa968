"""The XML bodies of the Azure Blob REST subset, as the service writes them: errors, List
Containers and List Blobs (EnumerationResults).

Contract: every body is well-formed XML 1.0 whatever the strings it is given. Text is escaped,
and a character XML cannot carry (blob_model.XML_UNSAFE) becomes U+FFFD — the handlers refuse
such characters in what they store and echo, so that only ever shows an old name; a metadata
name that is not a C# identifier (blob_model.METADATA_NAME, which every element name is)
is left out.
"""

from __future__ import annotations

from xml.sax.saxutils import escape as _escape
from xml.sax.saxutils import quoteattr as _quoteattr

from frontend.blob_model import (
    BLOB_TYPE,
    METADATA_NAME,
    XML_UNSAFE,
    Container,
    Props,
    http_date,
    http_etag,
)

PROLOGUE = '<?xml version="1.0" encoding="utf-8"?>'


def escape(text: str) -> str:
    """`text` as XML character data."""
    return _escape(XML_UNSAFE.sub("\ufffd", text))


def quoteattr(text: str) -> str:
    """`text` as a quoted XML attribute value."""
    return _quoteattr(XML_UNSAFE.sub("\ufffd", text))


def error(code: str, message: str, request_id: str, time: str) -> bytes:
    return (f"{PROLOGUE}<Error><Code>{escape(code)}</Code><Message>{escape(message)}\n"
            f"RequestId:{request_id}\nTime:{time}</Message></Error>").encode()


def _metadata(metadata: dict[str, str]) -> str:
    return "<Metadata>" + "".join(f"<{k}>{escape(v)}</{k}>" for k, v in metadata.items()
                                  if METADATA_NAME.fullmatch(k)) + "</Metadata>"


def _paging(prefix: str, marker: str, max_results: int | None) -> str:
    text = f"<Prefix>{escape(prefix)}</Prefix>" if prefix else ""
    text += f"<Marker>{escape(marker)}</Marker>" if marker else ""
    return text + (f"<MaxResults>{max_results}</MaxResults>" if max_results else "")


def containers(endpoint: str, prefix: str, marker: str, max_results: int | None,
               found: list[tuple[str, Container, str]], next_marker: str,
               with_metadata: bool) -> bytes:
    items = []
    for name, container, etag in found:
        meta = _metadata(container.metadata) if with_metadata else ""
        items.append(
            f"<Container><Name>{escape(name)}</Name><Properties>"
            f"<Last-Modified>{http_date(container.created_ms)}</Last-Modified>"
            f"<Etag>{escape(http_etag(etag))}</Etag><LeaseStatus>unlocked</LeaseStatus>"
            f"<LeaseState>available</LeaseState><HasImmutabilityPolicy>false"
            f"</HasImmutabilityPolicy><HasLegalHold>false</HasLegalHold></Properties>"
            f"{meta}</Container>")
    return (f"{PROLOGUE}<EnumerationResults ServiceEndpoint={quoteattr(endpoint)}>"
            f"{_paging(prefix, marker, max_results)}<Containers>{''.join(items)}</Containers>"
            f"<NextMarker>{escape(next_marker)}</NextMarker></EnumerationResults>").encode()


def blobs(endpoint: str, container: str, prefix: str, marker: str, max_results: int | None,
          delimiter: str, found: list[tuple[str, Props, str] | str], next_marker: str,
          with_metadata: bool) -> bytes:
    items = []
    for entry in found:
        if isinstance(entry, str):
            items.append(f"<BlobPrefix><Name>{escape(entry)}</Name></BlobPrefix>")
            continue
        name, props, etag = entry
        content = props.content
        meta = _metadata(props.metadata) if with_metadata else ""
        items.append(
            f"<Blob><Name>{escape(name)}</Name><Properties>"
            f"<Creation-Time>{http_date(props.created_ms)}</Creation-Time>"
            f"<Last-Modified>{http_date(props.modified_ms)}</Last-Modified>"
            f"<Etag>{escape(http_etag(etag))}</Etag>"
            f"<Content-Length>{props.length}</Content-Length>"
            f"<Content-Type>{escape(content.get('Content-Type', 'application/octet-stream'))}"
            f"</Content-Type>"
            f"<Content-Encoding>{escape(content.get('Content-Encoding', ''))}"
            f"</Content-Encoding>"
            f"<Content-Language>{escape(content.get('Content-Language', ''))}"
            f"</Content-Language>"
            f"<Content-MD5>{escape(content.get('Content-MD5', ''))}</Content-MD5>"
            f"<Cache-Control>{escape(content.get('Cache-Control', ''))}</Cache-Control>"
            f"<Content-Disposition>{escape(content.get('Content-Disposition', ''))}"
            f"</Content-Disposition>"
            f"<BlobType>{BLOB_TYPE}</BlobType><LeaseStatus>unlocked</LeaseStatus>"
            f"<LeaseState>available</LeaseState><ServerEncrypted>false</ServerEncrypted>"
            f"<Sealed>{'true' if props.sealed else 'false'}</Sealed></Properties>"
            f"{meta}</Blob>")
    delimited = f"<Delimiter>{escape(delimiter)}</Delimiter>" if delimiter else ""
    return (f"{PROLOGUE}<EnumerationResults ServiceEndpoint={quoteattr(endpoint)} "
            f"ContainerName={quoteattr(container)}>{_paging(prefix, marker, max_results)}"
            f"{delimited}<Blobs>{''.join(items)}</Blobs>"
            f"<NextMarker>{escape(next_marker)}</NextMarker></EnumerationResults>").encode()
