"""pair_metrics' templates rendered as the role renders them on the metrics host: the role's
defaults and vars around an inventory's own variables (hostvars, groups) as Ansible loads them,
through Ansible's Templar; and promtool, which checks what they make."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.hostvars import HostVars
from ansible.vars.manager import VariableManager

from tests.ansible_trust import render_template, trusted
from tests.helpers import REPO

ROLE = REPO / "roles/pair_metrics"
RULES = ROLE / "files/rules"
PRODUCTION = REPO / "inventory/production/hosts.yml"
# bin/setup installs Debian's prometheus package, which carries promtool and the server.
MISSING_TOOL = (
    "{tool} is not on PATH: it comes with Debian's prometheus package, which bin/setup installs "
    "(apt-get install prometheus)"
)


def tool(name: str) -> str:
    """The path of promtool or prometheus; fails the test (never skips) when it is missing."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(MISSING_TOOL.format(tool=name), pytrace=False)
    return found


def promtool(*args: str | Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("promtool"), *map(str, args)],
        cwd=cwd,
        text=True,
        capture_output=True,
        timeout=300,
        check=False,
    )


def _yaml(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def host_variables(inventory: Path, host: str) -> dict[str, Any]:
    """What the role sees on `host` of `inventory`: its defaults, the host's variables as Ansible
    loads them (group and host vars, hostvars of every host, groups), then its vars/main.yml."""
    loader = DataLoader()
    manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    # What a play's task queue sets up, so that the variables carry hostvars.
    variables._hostvars = HostVars(inventory=manager, variable_manager=variables, loader=loader)
    inventory_vars = variables.get_vars(host=manager.get_host(host), include_hostvars=True)
    return {
        **trusted(_yaml(ROLE / "defaults/main.yml")),
        **inventory_vars,
        **trusted(_yaml(ROLE / "vars/main.yml")),
        "ansible_managed": "Ansible managed",
    }


def render(template: str, variables: dict[str, Any]) -> str:
    """templates/<template> with the template module's Jinja settings."""
    return render_template(ROLE / "templates" / template, variables)
