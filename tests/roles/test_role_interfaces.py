"""Each role's interface agrees with itself, for every role and every entry point: every default is
an option of the role's main entry point and has the default the spec gives it, every option of
every entry point has a row in the README's tables, no spec gives a required option a default,
each option is written once in the spec (other entry points alias it), every entry point has its
task file, and every task file that a playbook or another role includes is an entry point."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO

ROLES = sorted(path for path in (REPO / "roles").iterdir() if path.is_dir())
SPECIFIED = [role for role in ROLES if (role / "meta/argument_specs.yml").exists()]
INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role")


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def _specs(role: Path) -> dict[str, Any]:
    path = role / "meta/argument_specs.yml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8"))["argument_specs"] or {}


def _defaults(role: Path) -> dict[str, Any]:
    path = role / "defaults/main.yml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _main_options(entry_points: dict[str, Any]) -> set[str]:
    """The main entry point's options; a role of task files only (no main) has their union."""
    chosen = [entry_points["main"]] if "main" in entry_points else entry_points.values()
    return {name for spec in chosen for name in spec.get("options") or {}}


def _readme_rows(role: Path) -> set[str]:
    readme = (role / "README.md").read_text(encoding="utf-8")
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", readme, flags=re.MULTILINE))


def _has_tasks(role: Path) -> bool:
    return (role / "tasks").is_dir()


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_defaults_spec_and_readme_agree(role: Path) -> None:
    defaults, specs, rows = _defaults(role), _specs(role), _readme_rows(role)
    problems = []
    for name, value in defaults.items():
        if name not in _main_options(specs):
            problems.append(f"{name}: not an option of the role's main entry point")
        for entry, spec in specs.items():
            option = (spec.get("options") or {}).get(name) or {}
            if "default" in option and not _templated(value) and option["default"] != value:
                problems.append(f"{name}: {entry}'s default {option['default']!r} != {value!r}")
    for entry, spec in specs.items():
        for name, option in (spec.get("options") or {}).items():
            if name not in rows:
                problems.append(f"{name} ({entry}): no row in README.md")
            if option.get("required") and "default" in option:
                problems.append(f"{name} ({entry}): required, yet its spec gives a default")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_a_role_has_a_readme_and_meta_and_an_interface_where_it_has_tasks(role: Path) -> None:
    assert (role / "README.md").is_file()
    assert (role / "meta/main.yml").is_file()
    if _has_tasks(role):
        assert (role / "defaults/main.yml").is_file()
        assert _specs(role), "a role with tasks has an argument spec"
    else:
        # A role of plugins only (a dependency of others): nothing to take, nothing to run.
        assert not (role / "defaults").exists()
        assert not _specs(role)


def _option_nodes(entry: yaml.MappingNode) -> Iterator[tuple[str, yaml.Node]]:
    """(name, value node) of each option of an entry point, merge keys (<<) followed."""
    options = next((v for k, v in entry.value if k.value == "options"), None)
    pending = [options] if options is not None else []
    while pending:
        node = pending.pop()
        if isinstance(node, yaml.SequenceNode):
            pending.extend(node.value)
            continue
        assert isinstance(node, yaml.MappingNode), node
        for key, value in node.value:
            if key.value == "<<":
                pending.append(value)
            else:
                yield key.value, value


@pytest.mark.parametrize("role", SPECIFIED, ids=[role.name for role in SPECIFIED])
def test_each_option_is_written_once(role: Path) -> None:
    """An option that several entry points take is one YAML node: written once and aliased
    (an anchor and *alias, or a whole options block), never a copy that could drift."""
    root = yaml.compose((role / "meta/argument_specs.yml").read_text(encoding="utf-8"))
    assert isinstance(root, yaml.MappingNode)
    (entry_points,) = [value for key, value in root.value if key.value == "argument_specs"]
    written: dict[str, yaml.Node] = {}
    copies = set()
    for _, entry in entry_points.value:
        for name, node in _option_nodes(entry):
            if written.setdefault(name, node) is not node:
                copies.add(name)
    assert not copies, f"written more than once: {sorted(copies)}"


@pytest.mark.parametrize("role", SPECIFIED, ids=[role.name for role in SPECIFIED])
def test_every_entry_point_has_its_task_file(role: Path) -> None:
    missing = [entry for entry in _specs(role) if not (role / f"tasks/{entry}.yml").is_file()]
    assert not missing, f"entry points without tasks/<entry>.yml: {missing}"


def _included_task_files() -> Iterator[tuple[str, str, Path]]:
    """(role, task file, where) for every include_role/import_role with tasks_from."""

    def walk(node: Any, where: Path) -> Iterator[tuple[str, str, Path]]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in INCLUDES and isinstance(value, dict) and "tasks_from" in value:
                    yield Path(str(value["name"])).name, str(value["tasks_from"]), where
                yield from walk(value, where)
        elif isinstance(node, list):
            for item in node:
                yield from walk(item, where)

    for base in ("playbooks", "roles", "molecule"):
        for path in sorted((REPO / base).rglob("*.yml")):
            yield from walk(yaml.safe_load(path.read_text(encoding="utf-8")), path)


def test_every_included_task_file_is_an_entry_point() -> None:
    included = list(_included_task_files())
    assert included
    missing = [
        f"{where.relative_to(REPO)}: {role} {tasks_from}"
        for role, tasks_from, where in included
        if tasks_from.removesuffix(".yml") not in _specs(REPO / "roles" / role)
    ]
    assert not missing, "\n".join(missing)
