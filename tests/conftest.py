"""The repository tests' fixtures; the helpers they share are in tests/helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
