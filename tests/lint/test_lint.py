"""Static checks, each a test so that one run reports them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, output_of, run_tool

PLAYBOOKS = sorted(p.relative_to(REPO) for p in (REPO / "playbooks").glob("*.yml"))


def test_ruff_check() -> None:
    result = run_tool("ruff", "check", ".")
    assert result.returncode == 0, output_of(result)


def test_ruff_format() -> None:
    result = run_tool("ruff", "format", "--check", ".")
    assert result.returncode == 0, output_of(result)


def test_yamllint() -> None:
    result = run_tool("yamllint", "--strict", ".")
    assert result.returncode == 0, output_of(result)


def test_ansible_lint_production_profile() -> None:
    result = run_tool("ansible-lint", "--profile", "production", "--strict")
    assert result.returncode == 0, output_of(result)


def test_no_blanket_lint_skips() -> None:
    config = (REPO / ".ansible-lint").read_text(encoding="utf-8")
    for key in ("skip_list", "warn_list", "enable_list: []"):
        assert f"\n{key}" not in config, f".ansible-lint must not carry a {key}"


def test_every_noqa_says_why() -> None:
    bare = []
    for path in REPO.glob("**/*.yml"):
        if ".venv" in path.parts or ".cache" in path.parts:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "# noqa" in line and not line.split("# noqa", 1)[1].split(None, 1)[1:]:
                bare.append(f"{path.relative_to(REPO)}:{number}")
    assert not bare, f"'# noqa' without a reason beside it: {bare}"


@pytest.mark.parametrize("playbook", [Path("site.yml"), *PLAYBOOKS], ids=str)
def test_playbook_syntax(playbook: Path) -> None:
    for inventory in ("inventory/production/hosts.yml", "inventory/lab/hosts.yml"):
        result = run_tool("ansible-playbook", "-i", inventory, "--syntax-check", str(playbook))
        assert result.returncode == 0, output_of(result)
