"""Evaluate the vllm_tp2_service role's own expressions and templates with Ansible's Templar."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.ansible_trust import trusted
from tests.conftest import REPO

ROLE = REPO / "roles/vllm_tp2_service"


def configure_task() -> dict[str, Any]:
    tasks = yaml.safe_load((ROLE / "tasks/configure.yml").read_text(encoding="utf-8"))
    (task,) = [
        t for t in tasks if "vllm_tp2_service_run_args" in t.get("ansible.builtin.set_fact", {})
    ]
    return task


def facts(inventory: dict[str, Any]) -> dict[str, Any]:
    """The facts configure.yml's set_fact publishes, for role defaults plus `inventory`."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text(encoding="utf-8"))
    task = configure_task()
    variables = trusted({**defaults, **task["vars"], **inventory})
    templar = Templar(loader=DataLoader(), variables=variables)
    published = templar.template(trusted(task["ansible.builtin.set_fact"]))
    return {**defaults, **inventory, **published}


def render(template: str, variables: dict[str, Any]) -> str:
    text = (ROLE / "templates" / template).read_text(encoding="utf-8")
    templar = Templar(loader=DataLoader(), variables=trusted(variables))
    return str(
        templar.template(
            trust_as_template(text),
            escape_backslashes=False,
            overrides={"trim_blocks": True, "lstrip_blocks": False},
        )
    )


def unit_lines(unit: str) -> dict[str, list[str]]:
    """Key -> values of a unit file, continuation lines joined."""
    joined = unit.replace("\\\n", "")
    entries: dict[str, list[str]] = {}
    for line in joined.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            entries.setdefault(key, []).append(value)
    return entries


def systemd_argv(command: str) -> list[str]:
    """Split an Exec line the way systemd does for the quoting the template uses."""
    return [arg.replace("%%", "%").replace("$$", "$") for arg in shlex.split(command.lstrip("-"))]


def write_unit(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path
