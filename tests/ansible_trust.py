"""Role files rendered through Ansible's Templar in tests, trusted as Ansible trusts them."""

from __future__ import annotations

from typing import Any

from ansible.template import trust_as_template


def trusted(value: Any) -> Any:
    """Mark every string as a template, as Ansible does for inventory and role files."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value
