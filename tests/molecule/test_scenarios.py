"""Each molecule scenario, run whole (destroy, create, converge, idempotence, verify, destroy).

The scenarios that may share the machine started when collection ended (``scenarios``); the
timed ones (`update`, `front_door`) run side by side with each other, after them and after every
other test of the session."""

from __future__ import annotations

import re

import pytest
import yaml

from lab import labctl
from tests.helpers import REPO, output_of
from tests.molecule.scenarios import (
    SCENARIOS,
    TIMED,
    failed_tasks,
    log_path,
    side_by_side,
    timed,
)


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
    # The timed ones after the others, beside each other.
    started = timed() if scenario in TIMED else side_by_side()
    result = started[scenario].result()
    assert result.returncode == 0, (
        f"molecule test -s {scenario} failed (whole log: {log_path(scenario)}).\n"
        f"Failed tasks:\n{failed_tasks(result.stdout + result.stderr)}\n"
        f"The output's end:\n{output_of(result, 300)}"
    )


def test_a_failed_run_is_summed_up_by_its_failed_tasks() -> None:
    output = "\n".join(
        [
            "TASK [Read the lock] ******",
            "ok: [localhost]",
            "TASK [Check that one update refused] ******",
            'fatal: [localhost]: FAILED! => {"msg": "rcs 0 / 0"}',
            "TASK [Wait for it] ***",
            "failed: [localhost] (item=spark-b) => {}",
            "PLAY RECAP ***",
        ]
    )
    assert failed_tasks(output).splitlines() == [
        "TASK [Check that one update refused]",
        'fatal: [localhost]: FAILED! => {"msg": "rcs 0 / 0"}',
        "TASK [Wait for it]",
        "failed: [localhost] (item=spark-b) => {}",
    ]
    assert failed_tasks("PLAY RECAP ***\nok: [localhost]") == "(no failed task in the output)"
