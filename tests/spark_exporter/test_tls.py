"""The certificate's expiry, read with the standard library, against what openssl reads."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spark_exporter import tls

from tests.spark_exporter.test_scrape import write_certificate


@pytest.mark.parametrize(
    "not_after",
    ["2031-05-06T07:08:09", "2049-12-31T23:59:59", "2051-01-02T03:04:05", "1999-03-04T05:06:07"],
    ids=["utctime", "last-utctime-year", "generalizedtime", "last-century"],
)
def test_not_after_matches_openssl(tmp_path: Path, not_after: str) -> None:
    path = tmp_path / "cert.pem"
    expected = write_certificate(path, not_after)

    assert tls.not_after(path.read_bytes()) == expected
    shown = subprocess.run(
        ["openssl", "x509", "-enddate", "-noout", "-in", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    end = datetime.strptime(shown.strip().removeprefix("notAfter="), "%b %d %H:%M:%S %Y GMT")
    assert end.replace(tzinfo=UTC).timestamp() == expected


def test_der_and_a_chain_give_the_first_certificate(tmp_path: Path) -> None:
    leaf, other = tmp_path / "leaf.pem", tmp_path / "ca.pem"
    expected = write_certificate(leaf, "2030-01-01T00:00:00")
    write_certificate(other, "2040-01-01T00:00:00")
    chain = leaf.read_bytes() + other.read_bytes()
    assert tls.not_after(chain) == expected
    der = subprocess.run(
        ["openssl", "x509", "-outform", "DER", "-in", str(leaf)], capture_output=True, check=True
    ).stdout
    assert tls.not_after(der) == expected


@pytest.mark.parametrize(
    "data", [b"", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"]
)
def test_what_is_no_certificate_is_refused(data: bytes) -> None:
    with pytest.raises((ValueError, IndexError)):
        tls.not_after(data)
