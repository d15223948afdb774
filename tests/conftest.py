"""The repository tests' fixtures; the helpers they share are in tests/helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO
from tests.molecule import scenarios


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Molecule scenarios last: the other tests run while the side-by-side scenarios converge,
    and `update`, which wants the machine to itself, runs after all of them."""
    items.sort(key=scenarios.is_scenario_test)


def pytest_collection_finish(session: pytest.Session) -> None:
    if not session.config.option.collectonly:
        scenarios.start_side_by_side(session.items)


def pytest_sessionfinish() -> None:
    scenarios.finish()
