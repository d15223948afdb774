"""Loads the rail_network role's Python plugins (they live in the role, not in a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO

ROLE = REPO / "roles/rail_network"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def rdma_module() -> ModuleType:
    return load(ROLE / "library/rail_network_rdma.py")


@pytest.fixture(scope="session")
def rail_filters() -> ModuleType:
    return load(ROLE / "filter_plugins/rail_network_filters.py")
