"""Role files rendered through Ansible's Templar in tests, trusted as Ansible trusts them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template


def trusted(value: Any) -> Any:
    """Mark every string as a template, as Ansible does for inventory and role files."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def evaluate(expression: Any, variables: dict[str, Any]) -> Any:
    """A role value (a template or a structure of them) as Ansible would resolve it."""
    templar = Templar(loader=DataLoader(), variables=trusted(variables))
    return templar.template(trusted(expression))


def render_template(path: Path, variables: dict[str, Any]) -> str:
    """A role's template file with the template module's Jinja settings."""
    templar = Templar(loader=DataLoader(), variables=trusted(variables))
    return str(
        templar.template(
            trust_as_template(path.read_text(encoding="utf-8")),
            escape_backslashes=False,
            overrides={"trim_blocks": True, "lstrip_blocks": False},
        )
    )
