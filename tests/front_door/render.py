"""The front_door role's template and expressions, rendered with Ansible's Templar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.ansible_trust import render_template
from tests.helpers import REPO

ROLE = REPO / "roles/front_door"


def role_file(relative: str) -> Any:
    return yaml.safe_load((ROLE / relative).read_text(encoding="utf-8"))


def role_variables(overrides: dict[str, Any]) -> dict[str, Any]:
    """Defaults, then the inventory (`overrides`); role vars win over both, as in Ansible, except
    where the test gives its own paths (as -e would)."""
    return {**role_file("defaults/main.yml"), **role_file("vars/main.yml"), **overrides}


def render(template: str, variables: dict[str, Any]) -> str:
    return render_template(ROLE / "templates" / template, variables)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path
