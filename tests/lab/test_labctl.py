"""The lab tool's own logic: mirror discovery and image freshness."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab import labctl


def sources_dir(tmp_path: Path, name: str, text: str) -> Path:
    directory = tmp_path / "sources.list.d"
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text, encoding="utf-8")
    return directory


def test_mirror_from_deb822(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = sources_dir(
        tmp_path,
        "debian.sources",
        "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n",
    )
    monkeypatch.setattr(labctl, "APT_SOURCES", (directory, tmp_path / "absent.list"))
    assert labctl.debian_mirror() == "http://mirror.example/debian"


def test_mirror_from_one_line_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    listing = tmp_path / "sources.list"
    listing.write_text(
        "# deb http://commented.example/debian bookworm main\n"
        "deb [arch=amd64] http://one-line.example/debian bookworm main\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(labctl, "APT_SOURCES", (tmp_path / "none.d", listing))
    assert labctl.debian_mirror() == "http://one-line.example/debian"


def test_no_mirror_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = sources_dir(tmp_path, "other.sources", "URIs: http://x.example\nSuites: trixie\n")
    monkeypatch.setattr(labctl, "APT_SOURCES", (directory,))
    with pytest.raises(labctl.LabError, match="no Debian 'bookworm' mirror"):
        labctl.debian_mirror()


def test_recipe_digest_follows_the_package_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    packages = tmp_path / "packages.txt"
    packages.write_text("systemd  # init\npython3\n", encoding="utf-8")
    monkeypatch.setattr(labctl, "PACKAGES_FILE", packages)
    assert labctl.image_packages() == ["systemd", "python3"]
    before = labctl.image_recipe_digest()
    packages.write_text("systemd\npython3\nrsync\n", encoding="utf-8")
    assert labctl.image_recipe_digest() != before


def test_rail_uses_the_production_twin_names() -> None:
    assert labctl.RAIL_INTERFACES == ("enp1s0f1np1", "enP2p1s0f1np1")
