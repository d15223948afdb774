"""Each role's interface agrees with itself: every default is an option of the role's main entry
point, every entry point that gives the option a default gives the same one, and the README's
variable table has a row for it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO

ROLES = sorted(path.parent.parent for path in REPO.glob("roles/*/defaults/main.yml"))


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def _main_options(entry_points: dict[str, Any]) -> set[str]:
    """The main entry point's options; a role of task files only (no main) has their union."""
    chosen = [entry_points["main"]] if "main" in entry_points else entry_points.values()
    return {name for spec in chosen for name in spec.get("options") or {}}


@pytest.mark.parametrize("role", ROLES, ids=[role.name for role in ROLES])
def test_defaults_spec_and_readme_agree(role: Path) -> None:
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text(encoding="utf-8")) or {}
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text(encoding="utf-8"))
    readme = (role / "README.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z0-9_]+)` \|", readme, flags=re.MULTILINE))
    problems = []
    for name, value in defaults.items():
        if name not in rows:
            problems.append(f"{name}: no row in README.md")
        if name not in _main_options(specs["argument_specs"]):
            problems.append(f"{name}: not an option of the role's main entry point")
        for entry, spec in specs["argument_specs"].items():
            option = (spec.get("options") or {}).get(name) or {}
            if "default" in option and not _templated(value) and option["default"] != value:
                problems.append(f"{name}: {entry}'s default {option['default']!r} != {value!r}")
    assert not problems, "\n".join(problems)
