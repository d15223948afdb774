"""Each molecule scenario, run whole (destroy, create, converge, idempotence, verify, destroy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, output_of, run_tool

SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def test_scenarios_found() -> None:
    assert "lab" in SCENARIOS, f"molecule scenarios under {REPO / 'molecule'}: {SCENARIOS}"


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario: str, tmp_path: Path) -> None:
    result = run_tool("molecule", "test", "-s", scenario, timeout=1500)
    (tmp_path / "molecule.log").write_text(result.stdout + result.stderr, encoding="utf-8")
    assert result.returncode == 0, f"molecule test -s {scenario} failed:\n{output_of(result, 300)}"
