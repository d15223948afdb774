"""When a TLS certificate expires (the front door's), read with the standard library alone: the
first certificate of a PEM (or DER) file, walked as DER to its validity's notAfter."""

from __future__ import annotations

import base64
import binascii
import calendar
import re
import time
from pathlib import Path

from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, SourceError

NAME = "tls"
_PEM = re.compile(rb"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", re.DOTALL)
SEQUENCE, UTC_TIME, GENERALIZED_TIME, EXPLICIT_0 = 0x30, 0x17, 0x18, 0xA0


def configured(settings: Settings) -> bool:
    return settings.tls_certificate is not None


def _elements(data: bytes) -> list[tuple[int, bytes]]:
    """The (tag, content) items of a DER encoding, in order."""
    items = []
    offset = 0
    while offset < len(data):
        tag = data[offset]
        length = data[offset + 1]
        offset += 2
        if length & 0x80:
            count = length & 0x7F
            if count == 0 or count > 4:
                raise ValueError("unsupported DER length")
            length = int.from_bytes(data[offset : offset + count], "big")
            offset += count
        if offset + length > len(data):
            raise ValueError("DER item runs past its container")
        items.append((tag, data[offset : offset + length]))
        offset += length
    return items


def _time(tag: int, value: bytes) -> float:
    text = value.decode("ascii")
    if not text.endswith("Z"):
        raise ValueError(f"not a UTC time: {text}")
    if tag == UTC_TIME:  # YYMMDDHHMMSSZ, years 1950-2049 (RFC 5280)
        year = int(text[:2])
        text = f"{1900 + year if year >= 50 else 2000 + year}{text[2:]}"
    parsed = time.strptime(text[:14], "%Y%m%d%H%M%S")
    return float(calendar.timegm(parsed))


def not_after(data: bytes) -> float:
    """The notAfter of the first certificate in ``data``, as Unix time."""
    if match := _PEM.search(data):
        data = base64.b64decode(b"".join(match[1].split()), validate=True)
    ((tag, certificate),) = _elements(data)[:1]
    if tag != SEQUENCE:
        raise ValueError("not a certificate")
    tag, tbs = _elements(certificate)[0]
    if tag != SEQUENCE:
        raise ValueError("no TBSCertificate")
    fields = _elements(tbs)
    if fields and fields[0][0] == EXPLICIT_0:  # version
        fields = fields[1:]
    # serialNumber, signature, issuer, validity
    tag, validity = fields[3]
    times = _elements(validity)
    if tag != SEQUENCE or len(times) != 2 or times[1][0] not in (UTC_TIME, GENERALIZED_TIME):
        raise ValueError("no validity")
    return _time(*times[1])


def collect(settings: Settings, metrics: Metrics, report: Report) -> None:
    path = settings.tls_certificate
    if path is None:
        return
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError as error:
        raise SourceError("not_found", f"{path}: {error}") from error
    except OSError as error:
        raise SourceError("unreadable", f"{path}: {error}") from error
    try:
        expiry = not_after(data)
    except (ValueError, IndexError, UnicodeDecodeError, binascii.Error) as error:
        raise SourceError("unparsable", f"{path}: {error}") from error
    metrics.gauge(
        "spark_tls_certificate_expiry_timestamp_seconds",
        "When the TLS certificate expires (its notAfter, Unix time).",
    ).add(expiry)
