"""The node-side check of a staged checkpoint against the hub's file list."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from tests.model_weights.conftest import Staged

SHARD = "model-00002-of-00003.safetensors"

# Two siblings exactly as the hub API answers `GET /api/models/<repo>/revision/<sha>?blobs=true`:
# a regular file (hashed by its git blob id) and an LFS file (hashed by sha256).
HUB_SIBLINGS = [
    {
        "rfilename": "config.json",
        "blobId": "c3b7c1cbb2d5e6b4d1b4c4dbb9a2e0f3c1d2e3f4",
        "size": 1234,
    },
    {
        "rfilename": "model-00001-of-00041.safetensors",
        "blobId": "5f3e4d2c1b0a99887766554433221100ffeeddcc",
        "size": 4997183232,
        "lfs": {
            "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "size": 4997183232,
            "pointerSize": 135,
        },
    },
]


def run(manifest: ModuleType, staged: Staged, action: str, *extra: str, capsys) -> dict:
    assert manifest.main(staged.args(action, *extra)) == 0
    return json.loads(capsys.readouterr().out)


def flip_bytes_keeping_size_and_time(path: Path, offset: int) -> None:
    times = path.stat()
    with path.open("r+b") as handle:
        handle.seek(offset)
        original = handle.read(16)
        handle.seek(offset)
        handle.write(bytes(b ^ 0xFF for b in original))
    os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))


def test_hub_siblings_become_files_with_the_right_hash(manifest):
    files = manifest.load_file_list({"siblings": HUB_SIBLINGS})
    config, shard = files
    assert (config.path, config.size, config.sha256) == ("config.json", 1234, None)
    assert config.git_sha1 == HUB_SIBLINGS[0]["blobId"]
    # An LFS file's blob id is its pointer's, never the content's: only sha256 may be used.
    assert shard.sha256 == HUB_SIBLINGS[1]["lfs"]["sha256"]
    assert shard.git_sha1 is None
    assert shard.size == 4997183232


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rfilename": "../etc/passwd"}, "plain relative path"),
        ({"rfilename": "/etc/passwd"}, "plain relative path"),
        ({"rfilename": "a//b"}, "plain relative path"),
        ({"rfilename": ".cache/huggingface/x"}, "reserved"),
        ({"size": -1}, "byte count"),
        ({"size": "12"}, "byte count"),
        ({"blobId": None}, "no content hash"),
        ({"blobId": "XYZ"}, "40 hex digits"),
    ],
)
def test_malformed_regular_sibling_is_refused(manifest, change, message):
    sibling = dict(HUB_SIBLINGS[0], **change)
    with pytest.raises(manifest.FileListError, match=message):
        manifest.load_file_list({"siblings": [sibling]})


def test_lfs_sibling_without_sha256_is_refused(manifest):
    sibling = json.loads(json.dumps(HUB_SIBLINGS[1]))
    del sibling["lfs"]["sha256"]
    with pytest.raises(manifest.FileListError, match="no content hash"):
        manifest.load_file_list({"siblings": [sibling]})


@pytest.mark.parametrize(
    "document",
    [{}, {"siblings": []}, {"siblings": "x"}, {"siblings": [HUB_SIBLINGS[0], HUB_SIBLINGS[0]]}],
)
def test_unusable_file_list_is_refused(manifest, document):
    with pytest.raises(manifest.FileListError):
        manifest.load_file_list(document)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_blob_id_matches_git_itself(manifest, tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b'{"hidden_size": 4096}\n')
    expected = subprocess.run(
        ["git", "hash-object", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert manifest.hash_file(path, with_git_header=True, size=path.stat().st_size) == expected


def test_generated_checkpoint_seals_and_then_checks_out(manifest, staged, capsys):
    before = run(manifest, staged, "check", capsys=capsys)
    assert before["complete"] and not before["verified"] and before["marker"] == "absent"

    sealed = run(manifest, staged, "seal", capsys=capsys)
    assert sealed["verified"] and sealed["changed"]
    marker = json.loads(staged.marker.read_text(encoding="utf-8"))
    assert marker["files"] == len(staged.api["siblings"])
    assert marker["bytes"] == sum(s["size"] for s in staged.api["siblings"])

    assert run(manifest, staged, "check", capsys=capsys)["verified"]
    assert run(manifest, staged, "check", "--deep", capsys=capsys)["verified"]
    assert not run(manifest, staged, "seal", capsys=capsys)["changed"]


def test_no_file_list_means_not_verified(manifest, staged, capsys):
    staged.file_list.unlink()
    result = run(manifest, staged, "check", capsys=capsys)
    assert result == {
        "verified": False,
        "complete": False,
        "marker": "absent",
        "reason": "no file list",
    }


def test_missing_shard_withdraws_the_marker(manifest, staged, capsys):
    run(manifest, staged, "seal", capsys=capsys)
    (staged.directory / SHARD).unlink()

    quick = run(manifest, staged, "check", capsys=capsys)
    assert not quick["verified"] and quick["missing"] == [SHARD]

    sealed = run(manifest, staged, "seal", capsys=capsys)
    assert not sealed["verified"] and sealed["changed"]
    assert not staged.marker.exists()


def test_partly_transferred_shard_is_short_and_counts_its_bytes(manifest, staged, capsys):
    path = staged.directory / SHARD
    size = path.stat().st_size
    with path.open("r+b") as handle:
        handle.truncate(size // 3)
    result = run(manifest, staged, "check", capsys=capsys)
    assert result["short"] == [SHARD] and not result["complete"]
    assert result["bytes_present"] == result["bytes_expected"] - size + size // 3


def test_oversized_shard_is_wrong(manifest, staged, capsys):
    with (staged.directory / SHARD).open("ab") as handle:
        handle.write(b"\0")
    assert run(manifest, staged, "check", capsys=capsys)["wrong"] == [SHARD]


def test_same_size_corruption_needs_the_deep_check(manifest, staged, capsys):
    run(manifest, staged, "seal", capsys=capsys)
    flip_bytes_keeping_size_and_time(staged.directory / SHARD, 40_000)

    # The quick check trusts the marker and the sizes; only hashing finds this.
    assert run(manifest, staged, "check", capsys=capsys)["verified"]
    deep = run(manifest, staged, "check", "--deep", capsys=capsys)
    assert not deep["verified"] and deep["wrong"] == [SHARD]
    assert staged.marker.exists(), "check must never write"

    sealed = run(manifest, staged, "seal", capsys=capsys)
    assert sealed["wrong"] == [SHARD] and not staged.marker.exists()


def test_corrupted_regular_file_is_caught_by_its_git_blob_id(manifest, staged, capsys):
    flip_bytes_keeping_size_and_time(staged.directory / "config.json", 2)
    assert run(manifest, staged, "check", "--deep", capsys=capsys)["wrong"] == ["config.json"]


def test_unexpected_files_fail_but_the_hub_clients_cache_does_not(manifest, staged, capsys):
    cache = staged.directory / ".cache/huggingface/download"
    cache.mkdir(parents=True)
    (cache / f"{SHARD}.metadata").write_text("resume state", encoding="utf-8")
    assert run(manifest, staged, "seal", capsys=capsys)["verified"]

    (staged.directory / "sub").mkdir()
    (staged.directory / "sub/stray.bin").write_bytes(b"x")
    result = run(manifest, staged, "seal", capsys=capsys)
    assert result["unexpected"] == ["sub/stray.bin"] and not result["verified"]


def test_index_naming_a_shard_the_repository_lacks_is_incomplete(manifest, staged, capsys):
    document = json.loads(staged.file_list.read_text(encoding="utf-8"))
    document["siblings"] = [s for s in document["siblings"] if s["rfilename"] != SHARD]
    staged.file_list.write_text(json.dumps(document), encoding="utf-8")
    (staged.directory / SHARD).unlink()

    result = run(manifest, staged, "seal", capsys=capsys)
    assert not result["verified"]
    assert result["index_problems"] == [
        f"model.safetensors.index.json: shard {SHARD} is not in the repository"
    ]


def test_shard_whose_tensors_do_not_fill_it_is_incomplete(manifest, staged, capsys):
    # A shard cut short and listed with its cut size (as a broken upload would be) passes the
    # size and hash checks; its header still says how long it must be.
    path = staged.directory / SHARD
    data = path.read_bytes()[:-100]
    path.write_bytes(data)
    document = json.loads(staged.file_list.read_text(encoding="utf-8"))
    for sibling in document["siblings"]:
        if sibling["rfilename"] == SHARD:
            sibling["size"] = sibling["lfs"]["size"] = len(data)
            sibling["lfs"]["sha256"] = hashlib.sha256(data).hexdigest()
    staged.file_list.write_text(json.dumps(document), encoding="utf-8")

    result = run(manifest, staged, "seal", capsys=capsys)
    assert result["index_problems"] == [f"{SHARD}: tensor data does not end at the end of the file"]


def test_safetensors_header_longer_than_the_file_is_caught(manifest, tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", 10_000) + b"{}")
    problem = manifest.safetensors_problem(path, path.stat().st_size)
    assert problem == "header length runs past the end of the file"


def test_marker_of_another_file_list_is_stale(manifest, staged, capsys):
    run(manifest, staged, "seal", capsys=capsys)
    staged.file_list.write_text(
        staged.file_list.read_text(encoding="utf-8") + " ", encoding="utf-8"
    )
    result = run(manifest, staged, "check", capsys=capsys)
    assert result["marker"] == "stale" and not result["verified"] and result["complete"]


def test_malformed_file_list_exits_with_an_error(manifest, staged, capsys):
    staged.file_list.write_text('{"siblings": [{"rfilename": "../x"}]}', encoding="utf-8")
    assert manifest.main(staged.args("check")) == 2
    assert "plain relative path" in json.loads(capsys.readouterr().out)["error"]


# What the role passes for a drafter (model_weights_draft_required_files, the reference's check).
DRAFTER_NEEDS = ("--require", "config.json", "--require", "model.safetensors")


def test_drafter_with_its_required_files_seals_and_checks_out(manifest, drafter, capsys):
    sealed = run(manifest, drafter, "seal", *DRAFTER_NEEDS, capsys=capsys)
    assert sealed["verified"] and sealed["not_provided"] == []
    assert run(manifest, drafter, "check", "--deep", *DRAFTER_NEEDS, capsys=capsys)["verified"]


def test_revision_without_a_required_file_is_never_verified(manifest, staged, capsys):
    # A sharded checkpoint has no model.safetensors: complete against its own file list, but not
    # what a drafter must be, so it is never marked verified as one.
    result = run(manifest, staged, "seal", *DRAFTER_NEEDS, capsys=capsys)
    assert not result["verified"] and not result["complete"]
    assert result["not_provided"] == ["model.safetensors"]
    assert result["reason"] == "required but not in the repository: model.safetensors"
    assert not staged.marker.exists()
    assert run(manifest, staged, "seal", capsys=capsys)["verified"]


def test_requiring_a_file_withdraws_a_marker_sealed_without_it(manifest, drafter, capsys):
    run(manifest, drafter, "seal", capsys=capsys)
    document = json.loads(drafter.file_list.read_text(encoding="utf-8"))
    document["siblings"] = [s for s in document["siblings"] if s["rfilename"] == "config.json"]
    drafter.file_list.write_text(json.dumps(document), encoding="utf-8")
    (drafter.directory / "model.safetensors").unlink()

    quick = run(manifest, drafter, "check", *DRAFTER_NEEDS, capsys=capsys)
    assert not quick["verified"] and quick["not_provided"] == ["model.safetensors"]
    sealed = run(manifest, drafter, "seal", *DRAFTER_NEEDS, capsys=capsys)
    assert not sealed["verified"] and not drafter.marker.exists()


def test_required_name_outside_the_directory_exits_with_an_error(manifest, drafter, capsys):
    assert manifest.main(drafter.args("check", "--require", "../config.json")) == 2
    assert "plain relative path" in json.loads(capsys.readouterr().out)["error"]
