"""The overlay release the controller builds: reproducible, complete, named by content."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO, write_demo_plugin

SCRIPT = REPO / "roles/dualpath_overlay/files/overlay_release.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("overlay_release", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def overlay_release() -> ModuleType:
    return load_script()


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A small package with a vllm.general_plugins entry point, laid out like the overlay."""
    return write_demo_plugin(tmp_path / "pkg")


def build(module: ModuleType, source: Path, out: Path) -> dict[str, str]:
    wheel = module.build_wheel(source, out)
    release: dict[str, str] = module.write_release(wheel, out)
    return release


def test_release_is_reproducible_and_named_by_content(
    overlay_release: ModuleType, package: Path, tmp_path: Path
) -> None:
    first = build(overlay_release, package, tmp_path / "a")
    second = build(overlay_release, package, tmp_path / "b")
    assert first["release"] == second["release"]
    assert first["release"].startswith("2.0.1-")
    digest = [hashlib.sha256(Path(r["tar"]).read_bytes()).hexdigest() for r in (first, second)]
    assert digest[0] == digest[1], "an unchanged source must give a byte-identical tar"
    (package / "src/demo_plugin/__init__.py").write_text("def register():\n    return 1\n")
    third = build(overlay_release, package, tmp_path / "c")
    assert third["release"] != first["release"]
    assert not list(package.glob("build")) and not list(package.glob("src/*.egg-info"))


def test_release_unpacks_to_an_importable_site_with_checksums(
    overlay_release: ModuleType, package: Path, tmp_path: Path
) -> None:
    release = build(overlay_release, package, tmp_path / "out")
    with tarfile.open(release["tar"]) as tar:
        names = tar.getnames()
        assert release["release"] not in names, "the node stamps the release directory itself"
        tar.extractall(tmp_path / "node", filter="data")
    root = tmp_path / "node" / release["release"]
    sums = (root / "SHA256SUMS").read_text().splitlines()
    listed = {line.split("  ", 1)[1] for line in sums}
    on_disk = {str(p.relative_to(root)) for p in (root / "site").rglob("*") if p.is_file()}
    assert listed == on_disk
    for line in sums:
        expected, name = line.split("  ", 1)
        assert hashlib.sha256((root / name).read_bytes()).hexdigest() == expected
    entry_points = next((root / "site").glob("*.dist-info/entry_points.txt")).read_text()
    assert "[vllm.general_plugins]" in entry_points
    assert "demo = demo_plugin:register" in entry_points


def test_the_real_overlay_builds(overlay_release: ModuleType, tmp_path: Path) -> None:
    source = REPO / "files/vllm_dualpath"
    if not (source / "pyproject.toml").is_file():
        pytest.skip("overlay sources absent")
    copy = tmp_path / "src"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", ".*"))
    release = build(overlay_release, copy, tmp_path / "out")
    with tarfile.open(release["tar"]) as tar:
        names = tar.getnames()
    assert any(n.endswith("/site/vllm_dualpath/plugin.py") for n in names)
    assert any(n.endswith(".dist-info/entry_points.txt") for n in names)


def test_only_what_the_wheel_ships_names_the_release(
    overlay_release: ModuleType, tmp_path: Path
) -> None:
    """The benchmarks and tests beside the package are not in the wheel: editing them leaves the
    release as it was, editing a shipped module makes a new one."""
    source = tmp_path / "src"
    shutil.copytree(
        REPO / "files/vllm_dualpath",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", ".*"),
    )
    first = build(overlay_release, source, tmp_path / "a")
    for beside in ("benchmarks/bench.py", "benchmarks/model_report.py", "tests/test_op.py"):
        with (source / beside).open("a", encoding="utf-8") as file:
            file.write("# edited\n")
    assert build(overlay_release, source, tmp_path / "b")["release"] == first["release"]
    with (source / "src/vllm_dualpath/op.py").open("a", encoding="utf-8") as file:
        file.write("# edited\n")
    assert build(overlay_release, source, tmp_path / "c")["release"] != first["release"]
