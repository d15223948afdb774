"""Staging a release is all or nothing (dualpath_overlay stage.yml), run on this machine against a
tmp dir: too little free space refuses with the numbers before anything is copied, a copy that
runs out of space anyway (a real small tmpfs, mounted in a user and mount namespace of its own)
leaves nothing behind, temporaries an interrupted run left are removed while another run's young
one is kept, an incomplete release is replaced, and a release there and verified is not staged
again."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO, output_of, run_tool, write_demo_plugin

ROLES = f"ANSIBLE_ROLES_PATH={REPO / 'roles'}"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small package with a vllm.general_plugins entry point, laid out like the overlay."""
    return write_demo_plugin(tmp_path_factory.mktemp("pkg"))


def stage(
    tmp_path: Path,
    package: Path,
    root: Path,
    *,
    tmpfs: str = "",
    check: bool = False,
    **overrides: Any,
) -> tuple[int, str, list[str]]:
    """Run stage.yml with the overlay's root at ``root`` (on a tmpfs of size ``tmpfs`` if given);
    return the exit code, the output and what releases/ holds afterwards (hidden names too)."""
    listing = tmp_path / "listing.json"
    listing.unlink(missing_ok=True)
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "dualpath_overlay_root": str(root),
                "dualpath_overlay_source_dir": str(package),
                "dualpath_overlay_build_dir": str(tmp_path / "build"),
                **overrides,
            },
            "tasks": [
                {
                    "name": "Stage",
                    "block": [
                        {
                            "ansible.builtin.include_role": {
                                "name": "dualpath_overlay",
                                "tasks_from": "stage.yml",
                            }
                        }
                    ],
                    "rescue": [{"ansible.builtin.debug": {"msg": "STAGING FAILED"}}],
                },
                {
                    "name": "List what releases/ holds",
                    "ansible.builtin.find": {
                        "paths": str(root / "releases"),
                        "file_type": "any",
                        "hidden": True,
                    },
                    "register": "listed",
                },
                {
                    "name": "Keep the list where the test sees it",
                    "ansible.builtin.copy": {
                        "dest": str(listing),
                        "content": "{{ listed.files | map(attribute='path') | map('basename') "
                        "| sort | to_json }}",
                        "mode": "0644",
                    },
                    "check_mode": False,
                },
                {"ansible.builtin.fail": {"msg": "STAGING FAILED"}, "when": "listed is failed"},
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    playbook = [
        "ansible-playbook",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ansible_python_interpreter={{ ansible_playbook_python }}",
        *(["--check", "--diff"] if check else []),
        "play.yml",
    ]
    if tmpfs:
        # A real small file system, seen by this run alone (no privilege needed beyond a user
        # namespace).
        mount = f"mount -t tmpfs -o size={tmpfs} tmpfs {shlex.quote(str(root))}"
        playbook = ["unshare", "-rm", "sh", "-c", f'{mount} && exec "$0" "$@"', *playbook]
    root.mkdir(parents=True, exist_ok=True)
    result = run_tool("env", ROLES, *playbook, cwd=tmp_path, timeout=300)
    output = " ".join(output_of(result, 300).split())
    failed = "STAGING FAILED" in output
    listed = json.loads(listing.read_text()) if listing.exists() else None
    assert listed is not None, output
    return (1 if failed else result.returncode), output, listed


def test_too_little_free_space_refuses_with_the_numbers(tmp_path: Path, package: Path) -> None:
    root = tmp_path / "root"
    code, output, listed = stage(tmp_path, package, root, tmpfs="1m")
    assert code != 0, output
    assert "Not enough free space to stage release 2.0.1-" in output, output
    assert "on localhost: it needs 64.0 MiB" in output, output
    assert "dualpath_overlay_stage_margin_mib=64" in output, output
    assert f"and 1.0 MiB (1048576 bytes) are free on the file system of {root}/releases" in output
    assert "Nothing was copied" in output, output
    assert listed == [], listed


def test_the_free_space_reading_can_be_given(tmp_path: Path, package: Path) -> None:
    code, output, listed = stage(
        tmp_path, package, tmp_path / "root", dualpath_overlay_stage_free_bytes=1000
    )
    assert code != 0, output
    assert "MiB (1000 bytes) are free" in output, output
    assert listed == [], listed


def test_a_copy_that_runs_out_of_space_leaves_nothing_behind(tmp_path: Path, package: Path) -> None:
    # The check passes (a reading of plenty), the copy then fills the 12 KiB file system.
    code, output, listed = stage(
        tmp_path, package, tmp_path / "root", tmpfs="12k", dualpath_overlay_stage_free_bytes=10**12
    )
    assert code != 0, output
    assert "failed at 'Unpack the release into it'" in output, output
    assert "No space left on device" in output, output
    assert "The partial copy" in output and "was removed" in output, output
    assert listed == [], f"a partial release or temporary directory was left: {listed}"


def test_a_release_lands_whole_once_and_is_not_staged_again(tmp_path: Path, package: Path) -> None:
    root = tmp_path / "root"
    code, output, listed = stage(tmp_path, package, root)
    assert code == 0, output
    (release,) = listed
    assert release.startswith("2.0.1-"), listed
    assert "changed: [localhost]" in output
    landed = root / "releases" / release
    marker = landed / "marker"
    marker.write_text("kept\n")  # not a file of the release: a new copy would not have it
    inode = landed.stat().st_ino

    code, output, listed = stage(tmp_path, package, root)
    assert code == 0, output
    assert listed == [release], listed
    # Nothing of the role changed (the one change is the test's own listing).
    assert not re.search(r"TASK \[dualpath_overlay : [^]]*\] \** changed:", output), output
    assert "changed=1 " in output, output
    assert marker.exists() and landed.stat().st_ino == inode


def test_leftovers_go_and_another_runs_young_staging_stays(tmp_path: Path, package: Path) -> None:
    root = tmp_path / "root"
    code, output, (release,) = stage(tmp_path, package, root)
    assert code == 0, output
    releases = root / "releases"
    # An interrupted run's temporary directory, an hour old; another run's, staging now; and the
    # release itself incomplete (unpacked in place by an interrupted older staging).
    stale = releases / f".staging-{release}.0badc0de"
    shutil.copytree(releases / release, stale / release)
    hour_ago = time.time() - 3600
    os.utime(stale, (hour_ago, hour_ago))
    young = releases / f".staging-{release}.5ca1ab1e"
    young.mkdir()
    (releases / release / "SHA256SUMS").unlink()
    (releases / release / "RELEASE").write_text("half")

    code, output, listed = stage(tmp_path, package, root)
    assert code == 0, output
    assert listed == sorted([release, young.name]), listed
    verified = run_tool("sha256sum", "--check", "--strict", "SHA256SUMS", cwd=releases / release)
    assert verified.returncode == 0, verified.stdout
    assert (releases / release / "RELEASE").read_text() != "half"


def test_check_mode_copies_nothing(tmp_path: Path, package: Path) -> None:
    root = tmp_path / "root"
    (root / "releases").mkdir(parents=True)
    code, output, listed = stage(tmp_path, package, root, check=True)
    assert code == 0, output
    assert "Would stage release 2.0.1-" in output, output
    assert listed == [], listed


def test_the_build_reports_the_release_size(tmp_path: Path, package: Path) -> None:
    result = run_tool(
        str(REPO / ".venv/bin/python"),
        str(REPO / "roles/dualpath_overlay/files/overlay_release.py"),
        "--source",
        str(package),
        "--out",
        str(tmp_path / "out"),
    )
    assert result.returncode == 0, output_of(result)
    built = json.loads(result.stdout)
    (tmp_path / "node").mkdir()
    assert run_tool("tar", "-xf", built["tar"], "-C", str(tmp_path / "node")).returncode == 0
    on_node = list((tmp_path / "node" / built["release"]).rglob("*"))
    assert built["entries"] == len(on_node) + 1
    assert built["bytes"] == sum(p.stat().st_size for p in on_node if p.is_file())
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]
