"""Every conditional of the repository's tasks is a string: an unquoted `: ` inside one makes
YAML read a mapping, which Ansible refuses only when the task runs ("Conditional expressions must
be strings"), often deep in a scenario."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO

CONDITIONAL_KEYS = ("when", "failed_when", "changed_when", "until")
ASSERT_MODULES = ("ansible.builtin.assert", "assert")
ROOTS = ("playbooks", "roles", "molecule", "site.yml")


def _yaml_files() -> Iterator[Path]:
    for root in ROOTS:
        path = REPO / root
        if path.is_file():
            yield path
        else:
            yield from sorted(path.rglob("*.yml"))


def _conditionals(node: Any) -> Iterator[tuple[str, Any]]:
    """(key, each condition) of every task-like mapping under node."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in CONDITIONAL_KEYS:
                yield from ((key, item) for item in (value if isinstance(value, list) else [value]))
            elif key in ASSERT_MODULES and isinstance(value, dict) and "that" in value:
                that = value["that"]
                yield from (("that", item) for item in (that if isinstance(that, list) else [that]))
            else:
                yield from _conditionals(value)
    elif isinstance(node, list):
        for item in node:
            yield from _conditionals(item)


def broken_conditionals(text: str) -> list[str]:
    return [
        f"{key}: {condition!r}"
        for document in yaml.safe_load_all(text)
        for key, condition in _conditionals(document)
        if not isinstance(condition, (str, bool))
    ]


def test_a_colon_in_an_unquoted_condition_is_found() -> None:
    task = """
- ansible.builtin.assert:
    that:
      - out is search('on spark-a: held')
      - "out is search('on spark-b: held')"
  when: x
"""
    assert broken_conditionals(task) == ['that: {"out is search(\'on spark-a": "held\')"}']


def test_every_condition_is_a_string() -> None:
    found = {
        str(path.relative_to(REPO)): broken
        for path in _yaml_files()
        if (broken := broken_conditionals(path.read_text(encoding="utf-8")))
    }
    assert not found, found
