"""The lab tool's own logic: mirror discovery, image freshness, and what `down --images` removes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from lab import labctl, standin_image

STANDIN = labctl.STANDIN_REPOSITORY


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


def test_one_rail_between_the_first_two_hosts_by_default() -> None:
    assert labctl.rail_pairs(("spark-a", "spark-b", "door"), ()) == [("spark-a", "spark-b")]
    assert labctl.rail_pairs(("door",), ()) == []


def test_a_rail_per_pair_given() -> None:
    hosts = ("spark-a", "spark-b", "spark-c", "spark-d", "door")
    rails = ("spark-a,spark-b", "spark-c,spark-d")
    assert labctl.rail_pairs(hosts, rails) == [("spark-a", "spark-b"), ("spark-c", "spark-d")]


@pytest.mark.parametrize(
    ("rails", "says"),
    [
        (("spark-a",), "give two different hosts"),
        (("spark-a,spark-a",), "give two different hosts"),
        (("spark-a,spark-z",), "give two different hosts"),
        (("spark-a,spark-b", "spark-b,spark-c"), "a host is on two rails"),
    ],
)
def test_a_wrong_rail_is_refused(rails: tuple[str, ...], says: str) -> None:
    with pytest.raises(labctl.LabError, match=says):
        labctl.rail_pairs(("spark-a", "spark-b", "spark-c"), rails)


class FakeDocker:
    """Stands in for ``labctl.docker``: images by reference, containers by name -> image.

    Answers the calls ``down`` makes; any other call fails the test."""

    def __init__(
        self,
        images: Iterable[str],
        containers: Mapping[str, str] | None = None,
        networks: Iterable[str] = (),
    ) -> None:
        self.images = set(images)
        self.containers = dict(containers or {})
        self.networks = set(networks)
        self.removed: list[str] = []

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        code, out = 0, ""
        match args:
            case ("ps", "-a", *rest):
                filters = [rest[i + 1] for i, arg in enumerate(rest) if arg == "--filter"]
                ancestors = {f.partition("=")[2] for f in filters if f.startswith("ancestor=")}
                labelled = any(f.startswith("label=") for f in filters)  # no lab hosts here
                names = [
                    name
                    for name, image in self.containers.items()
                    if not labelled and (not ancestors or image in ancestors)
                ]
                out = "\n".join(names)
            case ("inspect", "--format", _, *names):
                out = "\n".join(f"/{name} default" for name in names)
            case ("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", repository):
                out = "\n".join(i for i in self.images if i.rpartition(":")[0] == repository)
            case ("image", "inspect", reference):
                code = 0 if reference in self.images else 1
            case ("network", "inspect", network):
                code = 0 if network in self.networks else 1
            case ("network", "rm", network):
                self.networks.remove(network)
                self.removed.append(network)
            case ("rmi", *references):
                assert set(references) <= self.images, f"rmi of absent {references}"
                self.images -= set(references)
                self.removed += references
            case _:
                raise AssertionError(f"unexpected docker call {args}")
        if check and code:
            raise labctl.LabError(f"docker {' '.join(args)} failed")
        return subprocess.CompletedProcess(("docker", *args), code, out, "")


def fake_docker(monkeypatch: pytest.MonkeyPatch, docker: FakeDocker) -> FakeDocker:
    monkeypatch.setattr(labctl, "docker", docker)
    return docker


def test_down_images_removes_the_base_and_every_standin_tag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    built = {labctl.IMAGE, f"{STANDIN}:0123456789abcdef", f"{STANDIN}:latest"}
    docker = fake_docker(monkeypatch, FakeDocker({*built, "debian:bookworm"}))
    labctl.down(labctl.DEFAULT_PREFIX, images=True)
    assert docker.images == {"debian:bookworm"}
    assert set(docker.removed) == built
    assert docker.removed[-1] == labctl.IMAGE, "the stand-in is built on the base: it goes first"
    output = capsys.readouterr().out
    assert all(f"removed image {image}" in output for image in built)


def test_down_images_when_they_are_gone_is_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    docker = fake_docker(monkeypatch, FakeDocker({"debian:bookworm"}))
    labctl.down(labctl.DEFAULT_PREFIX, images=True)
    labctl.down(labctl.DEFAULT_PREFIX, images=True)
    assert docker.removed == []
    assert "image" not in capsys.readouterr().out


def test_down_without_images_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    docker = fake_docker(monkeypatch, FakeDocker({labctl.IMAGE, f"{STANDIN}:latest"}))
    labctl.down(labctl.DEFAULT_PREFIX, images=False)
    assert docker.removed == []


def test_down_removes_the_labs_network(monkeypatch: pytest.MonkeyPatch) -> None:
    docker = fake_docker(monkeypatch, FakeDocker(set(), networks={labctl.DEFAULT_PREFIX, "other"}))
    labctl.down(labctl.DEFAULT_PREFIX, images=False)
    assert docker.removed == [labctl.DEFAULT_PREFIX]
    assert docker.networks == {"other"}


@pytest.mark.parametrize("used", [f"{STANDIN}:latest", labctl.IMAGE])
def test_down_images_removes_none_while_a_container_uses_one(
    monkeypatch: pytest.MonkeyPatch, used: str
) -> None:
    images = {labctl.IMAGE, f"{STANDIN}:latest"}
    docker = fake_docker(monkeypatch, FakeDocker(images, {"other-lab-spark-a-vllm": used}))
    with pytest.raises(labctl.LabError, match="other-lab-spark-a-vllm"):
        labctl.down(labctl.DEFAULT_PREFIX, images=True)
    assert docker.images == images


def test_down_removes_the_images_standin_image_builds() -> None:
    assert standin_image.REPOSITORY == labctl.STANDIN_REPOSITORY
