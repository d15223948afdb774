"""Each molecule scenario, run whole (destroy, create, converge, idempotence, verify, destroy).

Scenarios whose timeouts leave room for a busy machine run side by side, each on hosts of its
own; `update`, whose gates time out in seconds on purpose, runs alone after them."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import pytest
import yaml

from lab import labctl
from tests.helpers import REPO, output_of, run_tool

LOGS = REPO / ".cache/molecule-logs"
SCENARIOS = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml"))
ALONE = frozenset({"update"})


def run_scenario(scenario: str) -> subprocess.CompletedProcess[str]:
    result = run_tool("molecule", "test", "-s", scenario, timeout=1500)
    # The whole log, kept past the run: a failure shows only its tail.
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / f"{scenario}.log").write_text(result.stdout + result.stderr, encoding="utf-8")
    return result


@pytest.fixture(scope="module")
def side_by_side(
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The selected scenarios that may share the machine, all started at once."""
    selected = {
        item.callspec.params["scenario"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_molecule_scenario"
    }
    shared = sorted(selected - ALONE)
    with ThreadPoolExecutor(max_workers=max(len(shared), 1)) as pool:
        yield {scenario: pool.submit(run_scenario, scenario) for scenario in shared}


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
def test_molecule_scenario(scenario: str, request: pytest.FixtureRequest) -> None:
    if scenario in ALONE:
        wait(request.getfixturevalue("side_by_side").values())  # alone: after the others
        result = run_scenario(scenario)
    else:
        result = request.getfixturevalue("side_by_side")[scenario].result()
    assert result.returncode == 0, (
        f"molecule test -s {scenario} failed (whole log: {LOGS / scenario}.log):\n"
        f"{output_of(result, 300)}"
    )
