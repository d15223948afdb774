"""One front door (HAProxy and three pair doubles) shared by the tests of this package."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.front_door.door import FrontDoorUnderTest, front_door


@pytest.fixture(scope="package")
def shared_door(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FrontDoorUnderTest]:
    # A short directory: UNIX socket paths are limited to 107 bytes.
    directory = Path(tmp_path_factory.mktemp("fd", numbered=True))
    with front_door(directory, ("pair_one", "pair_two", "pair_three")) as door:
        yield door


@pytest.fixture
def door(shared_door: FrontDoorUnderTest) -> FrontDoorUnderTest:
    """The shared front door with every pair healthy, ready and UP."""
    shared_door.heal()
    return shared_door
