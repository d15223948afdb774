"""site.yml's steps each have a tag: `--tags <step>` runs that step's roles and, whatever the tags,
the inventory check and the pair layout (every step needs the pair's peer and ranks); no other
step's roles. Read from `ansible-playbook --list-tasks`, which connects to no node."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import output_of, run_tool

# Roles that run their tasks statically in each step (roles included by name at run time show as
# the including task, so the service's own role is known by that task's name).
STEP_ROLES = {
    "pairs": {"spark_pair"},
    "network": {"rail_network"},
    "weights": {"model_weights"},
    "runtime": {"container_runtime"},
    "overlay": set(),
    "service": {"container_runtime"},
}
ALWAYS = {"inventory_check", "spark_pair"}
STEP_TASKS = {
    "overlay": "Stage, activate and prune the overlay release",
    "service": "Configure, start and gate the pair",
}
# Ansible validates a role's arguments whatever the tags: that task names every role.
VALIDATION = "Validating arguments against arg spec"


def listed_tasks(tag: str) -> list[str]:
    result = run_tool(
        "ansible-playbook", "-i", "inventory/lab", "site.yml", "--list-tasks", "--tags", tag
    )
    assert result.returncode == 0, output_of(result)
    return [
        line.split("\t")[0].strip()
        for line in result.stdout.splitlines()
        if "\tTAGS: " in line and not line.lstrip().startswith("play #")
    ]


@pytest.fixture(scope="module")
def tasks_by_tag() -> dict[str, list[str]]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(zip(STEP_ROLES, pool.map(listed_tasks, STEP_ROLES), strict=True))


@pytest.mark.parametrize("tag", STEP_ROLES)
def test_a_tag_runs_its_step_and_no_other(tasks_by_tag: dict[str, list[str]], tag: str) -> None:
    tasks = tasks_by_tag[tag]
    roles = {
        match.group(1)
        for task in tasks
        if VALIDATION not in task and (match := re.match(r"(\w+) : ", task))
    }
    assert roles == ALWAYS | STEP_ROLES[tag], tasks
    if tag in STEP_TASKS:
        assert STEP_TASKS[tag] in tasks, tasks
    for other, name in STEP_TASKS.items():
        if other != tag:
            assert name not in tasks, tasks
