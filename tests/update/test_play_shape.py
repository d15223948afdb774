"""The shape of the rolling plays that the pair's rollback depends on."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.helpers import REPO

ROLLING_PLAYBOOKS = ("playbooks/update.yml", "playbooks/rollback.yml")


def plays(playbook: str) -> list[dict[str, Any]]:
    """The playbook's own plays, after the inventory check it imports first (playbooks/check.yml,
    tests/inventory_check)."""
    loaded = yaml.safe_load((REPO / playbook).read_text(encoding="utf-8"))
    assert isinstance(loaded, list)
    assert loaded[0].get("ansible.builtin.import_playbook") == "check.yml", loaded[0]
    return loaded[1:]


@pytest.mark.parametrize("playbook", ROLLING_PLAYBOOKS)
def test_every_node_is_checked_before_any_pair_rolls(playbook: str) -> None:
    first = plays(playbook)[0]
    assert first["hosts"] == "dualspark"
    assert first["any_errors_fatal"] is True
    assert "serial" not in first


@pytest.mark.parametrize("playbook", ROLLING_PLAYBOOKS)
def test_pairs_roll_one_at_a_time_and_fail_together(playbook: str) -> None:
    roll = plays(playbook)[1]
    assert roll["serial"] == 2
    assert roll["order"] == "inventory"
    # A failure on one node must send its peer into the rescue too (the rollback needs both).
    assert roll["any_errors_fatal"] is True
    # max_fail_percentage ends the play before the rescue when one node of the pair fails alone.
    assert "max_fail_percentage" not in roll
    (task,) = roll["tasks"]
    include = task["ansible.builtin.include_role"]
    assert include == {"name": "rolling_update", "tasks_from": "pair.yml"}
