"""The lab hosts' bytecode cache for modules imported from zips, run in fresh interpreters."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lab import labctl

HOOK = labctl.ZIP_BYTECODE_CACHE
MODULE = "def where():\n    raise RuntimeError('from the zip')\n\nANSWER = {answer}\n"
# Imports the module from the zip with the hook loaded, as a .pth file loads it on a lab host.
PROBE = """
import sys, traceback
sys.path.insert(0, {hook_dir!r})
import zip_bytecode_cache
sys.path.insert(0, {zip!r})
import payload
print(payload.ANSWER)
try:
    payload.where()
except RuntimeError:
    print(traceback.extract_tb(sys.exc_info()[2])[-1].filename)
"""


def make_zip(path: Path, answer: int) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("payload.py", MODULE.format(answer=answer))
    return path


def import_from(archive: Path, cache: Path) -> list[str]:
    probe = PROBE.format(hook_dir=str(HOOK.parent), zip=str(archive))
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={"ZIP_BYTECODE_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.splitlines()


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def test_a_second_run_from_another_zip_uses_the_cached_code(tmp_path: Path, cache: Path) -> None:
    first = import_from(make_zip(tmp_path / "run-1.zip", 4), cache)
    entries = sorted(cache.iterdir())
    assert first[0] == "4"
    assert len(entries) == 1
    # A marker only the cached code can print: the entry is what the second run executes.
    entries[0].write_bytes(
        __import__("marshal").dumps(
            compile(MODULE.format(answer="'cached'"), "elsewhere.py", "exec")
        )
    )
    assert import_from(make_zip(tmp_path / "run-2.zip", 4), cache)[0] == "cached"


def test_tracebacks_name_the_zip_of_the_run_at_hand(tmp_path: Path, cache: Path) -> None:
    import_from(make_zip(tmp_path / "run-1.zip", 4), cache)
    second = import_from(make_zip(tmp_path / "run-2.zip", 4), cache)
    assert second[1] == str(tmp_path / "run-2.zip" / "payload.py")


def test_changed_source_is_compiled_again(tmp_path: Path, cache: Path) -> None:
    assert import_from(make_zip(tmp_path / "run-1.zip", 4), cache)[0] == "4"
    assert import_from(make_zip(tmp_path / "run-2.zip", 5), cache)[0] == "5"
    assert len(list(cache.iterdir())) == 2


def test_an_unreadable_entry_is_compiled_again(tmp_path: Path, cache: Path) -> None:
    import_from(make_zip(tmp_path / "run-1.zip", 4), cache)
    (entry,) = cache.iterdir()
    entry.write_bytes(b"not marshal data")
    assert import_from(make_zip(tmp_path / "run-2.zip", 4), cache)[0] == "4"


def test_a_cache_that_cannot_be_written_costs_nothing_but_the_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    assert import_from(make_zip(tmp_path / "run-1.zip", 4), blocker / "cache")[0] == "4"


def test_the_image_loads_it_and_rebuilds_when_it_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / labctl.HOST_SITE_PACKAGES).mkdir(parents=True)
    (rootfs / "etc/systemd/system").mkdir(parents=True)
    labctl.prepare_rootfs(rootfs)
    site = rootfs / labctl.HOST_SITE_PACKAGES
    assert (site / "zip-bytecode-cache.pth").read_text(encoding="utf-8") == (
        "import zip_bytecode_cache\n"
    )
    assert (site / "zip_bytecode_cache.py").read_bytes() == HOOK.read_bytes()
    before = labctl.image_recipe_digest()
    changed = tmp_path / "zip_bytecode_cache.py"
    changed.write_text(HOOK.read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    monkeypatch.setattr(labctl, "ZIP_BYTECODE_CACHE", changed)
    assert labctl.image_recipe_digest() != before
