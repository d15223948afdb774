"""Every playbook that changes nodes checks the inventory in its first play and stops there on a
bad one, before its next play starts; each names the concerns of what it runs; a concern passed
earlier in the same run is not checked again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.inventory_check.conftest import flat, good_inventory, problems, run_playbook
from tests.inventory_check.conftest import write_inventory as write

CHECK_PLAY = "Check the inventory on the controller before any node changes"
SPEC = yaml.safe_load((REPO / "roles/inventory_check/meta/argument_specs.yml").read_text())
DEFAULT = SPEC["argument_specs"]["main"]["options"]["inventory_check_concerns"]["default"]
# What each playbook's roles read, at least.
NEEDS = {
    "playbooks/network.yml": {"pairs", "rail"},
    "playbooks/weights.yml": {"pairs", "model"},
    "playbooks/runtime.yml": {"pairs", "image"},
    "playbooks/overlay.yml": {"overlay"},
    "playbooks/service.yml": {"pairs", "rail", "rendezvous", "image", "api_key", "model"}
    | {"overlay", "service"},
    "playbooks/update.yml": {"pairs", "rail", "rendezvous", "image", "api_key", "model"}
    | {"overlay", "service"},
    "playbooks/rollback.yml": {"pairs", "rail", "rendezvous", "image", "api_key", "model"}
    | {"overlay", "service", "rollback"},
}
CHANGING = [*NEEDS, "site.yml"]


def first_play(playbook: str) -> dict[str, Any]:
    plays = yaml.safe_load((REPO / playbook).read_text(encoding="utf-8"))
    if playbook == "site.yml":  # imports playbooks/site.yml
        plays = yaml.safe_load((REPO / "playbooks/site.yml").read_text(encoding="utf-8"))
    return plays[0]


def concerns_of(playbook: str) -> list[str]:
    play = first_play(playbook)
    return (play.get("vars") or {}).get("inventory_check_concerns", DEFAULT)


@pytest.mark.parametrize("playbook", CHANGING)
def test_the_first_play_is_the_check(playbook: str) -> None:
    play = first_play(playbook)
    assert play.get("ansible.builtin.import_playbook") == "check.yml", play
    concerns = set(concerns_of(playbook))
    assert {"options", "variables"} <= concerns, concerns
    assert NEEDS.get(playbook, set(DEFAULT)) <= concerns, concerns


def test_site_checks_every_concern_but_the_rollback_first() -> None:
    assert set(concerns_of("site.yml")) == set(DEFAULT)
    assert "rollback" not in DEFAULT


@pytest.mark.parametrize("playbook", CHANGING)
def test_a_bad_inventory_stops_the_playbook_in_its_check(tmp_path: Path, playbook: str) -> None:
    inventory = good_inventory()
    inventory["host_vars"]["s2"]["spark_pair_rank"] = 0  # pair_one: two rank 0 nodes
    result = run_playbook(write(tmp_path / "inventory", inventory), playbook=playbook)
    output = flat(result)
    assert result.returncode != 0, output
    plays = [line for line in output.splitlines() if line.startswith("PLAY [")]
    assert len(plays) == 1 and plays[0].startswith(f"PLAY [{CHECK_PLAY}]"), plays
    assert any(p.startswith("spark_pair_rank (s1, s2): is 0 on both") for p in problems(result))


def test_rollback_needs_the_release_named(tmp_path: Path) -> None:
    inventory = write(tmp_path / "inventory", good_inventory())
    result = run_playbook(inventory, playbook="playbooks/rollback.yml")
    assert result.returncode != 0, flat(result)
    assert [p.split(":", 1)[0] for p in problems(result)] == [
        "rolling_update_release (s1, s2, s3, s4)"
    ], flat(result)


@pytest.mark.parametrize("playbook", CHANGING)
def test_each_playbook_checks_only_what_it_runs(tmp_path: Path, playbook: str) -> None:
    """No API key: refused only where the service is configured."""
    inventory = good_inventory()
    inventory["group_vars"]["all"]["vllm_tp2_service_api_key"] = ""
    concerns = json.dumps({"inventory_check_concerns": concerns_of(playbook)})
    release = ["-e", "rolling_update_release=0.1.0-9eb9a229b23d"]
    result = run_playbook(write(tmp_path / "inventory", inventory), "-e", concerns, *release)
    refused = [p.split(" (", 1)[0] for p in problems(result)]
    if "api_key" in concerns_of(playbook):
        assert refused == ["vllm_tp2_service_api_key"], flat(result)
    else:
        assert result.returncode == 0 and not refused, flat(result)


def test_a_second_check_in_the_same_run_checks_nothing_again(tmp_path: Path) -> None:
    playbook = tmp_path / "twice.yml"
    check = str(REPO / "playbooks/check.yml")
    playbook.write_text(
        yaml.safe_dump(
            [
                {"ansible.builtin.import_playbook": check},
                {
                    "ansible.builtin.import_playbook": check,
                    "vars": {"inventory_check_concerns": ["pairs", "rail"]},
                },
            ]
        ),
        encoding="utf-8",
    )
    inventory = write(tmp_path / "inventory", good_inventory())
    result = run_playbook(inventory, playbook=str(playbook))
    output = flat(result)
    assert result.returncode == 0, output
    read = "TASK [inventory_check : Read the options of every role on the roles path"
    assert output.count(read) == 1, output
    assert output.count("TASK [inventory_check : Check what is left to check]") == 2, output


def test_the_check_can_be_turned_off(tmp_path: Path) -> None:
    """-e '{"inventory_check_concerns": []}' leaves the roles' own checks alone to answer
    (tests/rail_network/test_bad_input.py runs network.yml so)."""
    inventory = good_inventory()
    inventory["host_vars"]["s2"]["spark_pair_rank"] = 0
    path = write(tmp_path / "inventory", inventory)
    result = run_playbook(path, "-e", '{"inventory_check_concerns": []}')
    assert result.returncode == 0, flat(result)
    assert "TASK [inventory_check : Read the options" not in flat(result)
