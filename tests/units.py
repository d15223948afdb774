"""A role's systemd unit as Ansible renders it: the role's defaults under the inventory's
variables, the template through Ansible's Templar; and `systemd-analyze verify` of the result."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.ansible_trust import evaluate, render_template
from tests.helpers import REPO


def role_variables(role: str, inventory: dict[str, Any]) -> dict[str, Any]:
    path = REPO / "roles" / role / "defaults/main.yml"
    defaults = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return {**defaults, "ansible_managed": "Ansible managed", **inventory}


def resolve(variables: dict[str, Any], name: str) -> Any:
    """One variable's value, templated as a task would see it."""
    return evaluate(variables[name], variables)


def render(role: str, template: str, variables: dict[str, Any]) -> str:
    return render_template(REPO / "roles" / role / "templates" / template, variables)


def verify(directory: Path, name: str, text: str) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of the unit written as directory/name; problems of other units
    (the machine's own) are left out of what the caller sees."""
    path = directory / name
    path.write_text(text, encoding="utf-8")
    result = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False
    )
    mine = "\n".join(line for line in result.stderr.splitlines() if name in line)
    return subprocess.CompletedProcess(result.args, result.returncode, result.stdout, mine)
