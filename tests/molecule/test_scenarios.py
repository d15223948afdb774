"""Each molecule scenario, run whole (destroy, create, converge, idempotence, verify, destroy)."""

from __future__ import annotations

import re

import pytest
import yaml

from lab import labctl
from tests.helpers import REPO, output_of, run_tool

LOGS = REPO / ".cache/molecule-logs"
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))


def test_scenarios_found() -> None:
    assert "lab" in SCENARIOS, f"molecule scenarios under {REPO / 'molecule'}: {SCENARIOS}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario_hosts_are_apart_from_the_readme_lab(scenario: str) -> None:
    """bin/test must leave the lab of bin/lab-site running: no scenario may take its names."""
    prefixes = set()
    for playbook in ("create.yml", "destroy.yml"):
        (play,) = yaml.safe_load((REPO / "molecule/shared" / playbook).read_text(encoding="utf-8"))
        template = play["vars"]["lab_prefix"]
        prefixes.add(re.sub(r"\{\{.*MOLECULE_SCENARIO_NAME.*\}\}", scenario, template))
    (prefix,) = prefixes
    assert "{{" not in prefix and prefix != labctl.DEFAULT_PREFIX, prefix


@pytest.mark.molecule
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_molecule_scenario(scenario: str) -> None:
    result = run_tool("molecule", "test", "-s", scenario, timeout=1500)
    # The whole log, kept past the run: a failure shows only its tail.
    log = LOGS / f"{scenario}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(result.stdout + result.stderr, encoding="utf-8")
    assert result.returncode == 0, (
        f"molecule test -s {scenario} failed (whole log: {log}):\n{output_of(result, 300)}"
    )
