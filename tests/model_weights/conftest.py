"""Load the role's node-side scripts as modules, and generate checkpoints to check with them."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

from lab import make_checkpoint
from tests.helpers import REPO

ROLE_FILES = REPO / "roles/model_weights/files"


def load_script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROLE_FILES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def manifest() -> ModuleType:
    return load_script("weights_manifest")


@pytest.fixture(scope="session")
def fetch_hub() -> ModuleType:
    return load_script("weights_fetch_hub")


@dataclass
class Staged:
    """A revision laid out as the role lays it out on a node."""

    directory: Path
    file_list: Path
    marker: Path
    api: dict

    def args(self, action: str, *extra: str) -> list[str]:
        return [
            action,
            "--dir",
            str(self.directory),
            "--file-list",
            str(self.file_list),
            "--marker",
            str(self.marker),
            *extra,
        ]


def lay_out(hub: Path, api: dict) -> Staged:
    """The generated repository under hub/files with the file list the role writes beside it."""
    revision = api["sha"]
    file_list = hub.parent / f"{revision}.files.json"
    document = {"sha": revision, "siblings": sorted(api["siblings"], key=lambda s: s["rfilename"])}
    file_list.write_text(json.dumps(document, indent=4, sort_keys=True) + "\n", encoding="utf-8")
    return Staged(hub / "files", file_list, hub.parent / f"{revision}.verified", api)


@pytest.fixture
def staged(tmp_path: Path) -> Staged:
    """Three 64 KiB shards, their index and a config, with the file list the role writes."""
    api = make_checkpoint.generate(tmp_path / "hub", seed=7, shards=3, shard_bytes=64 * 1024)
    return lay_out(tmp_path / "hub", api)


@pytest.fixture
def drafter(tmp_path: Path) -> Staged:
    """A drafter as the DFlash2 repositories lay it out: config.json and one model.safetensors."""
    api = make_checkpoint.generate(
        tmp_path / "drafter", seed=7, shards=1, shard_bytes=64 * 1024, single_file=True
    )
    return lay_out(tmp_path / "drafter", api)
