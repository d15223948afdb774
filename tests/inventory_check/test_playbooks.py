"""Every playbook that changes nodes checks the inventory in its first play and stops there on a
bad one, before its next play starts; each names the concerns of what it runs; a concern passed
earlier in the same run is not checked again.

Each playbook runs once, on one inventory broken three ways (bad_inventory): where it stops and
what it refuses answer both questions. The module's runs start together."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from tests.helpers import REPO
from tests.inventory_check.conftest import (
    Run,
    flat,
    good_inventory,
    problems,
    start_playbook,
)
from tests.inventory_check.conftest import write_inventory as write

CHECK_PLAY = "Check the inventory on the controller before any node changes"
SPEC = yaml.safe_load((REPO / "roles/inventory_check/meta/argument_specs.yml").read_text())
DEFAULT = SPEC["argument_specs"]["main"]["options"]["inventory_check_concerns"]["default"]
# What each playbook's roles read, at least.
NEEDS = {
    "playbooks/network.yml": {"pairs", "rail"},
    "playbooks/weights.yml": {"pairs", "model"},
    "playbooks/runtime.yml": {"pairs", "image"},
    "playbooks/monitoring.yml": {"pairs", "rail"},
    "playbooks/metrics.yml": {"pairs"},
    "playbooks/dashboards.yml": {"pairs"},
    "playbooks/front_door.yml": {"pairs", "api_key"},
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


@pytest.fixture(scope="module")
def runs(pool: ThreadPoolExecutor, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Every run of this module, started together: each playbook on one bad inventory; a play
    that checks twice, and the check turned off."""
    directory = tmp_path_factory.mktemp("playbooks")
    bad = write(directory / "bad", bad_inventory())
    good = write(directory / "good", good_inventory())
    playbook = directory / "twice.yml"
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
    started: dict[str, Future[Run]] = {
        name: start_playbook(pool, bad, playbook=name) for name in CHANGING
    }
    started["twice"] = start_playbook(pool, good, playbook=str(playbook))
    started["off"] = start_playbook(pool, bad, "-e", '{"inventory_check_concerns": []}')
    return {name: future.result() for name, future in started.items()}


def bad_inventory() -> dict[str, Any]:
    """pair_one has two rank 0 nodes, which every playbook's check refuses; no API key, which
    only those that run the service refuse (on s3, rank 0 of pair_two: pair_one forms no pair);
    no release named, which only rollback.yml refuses."""
    inventory = good_inventory()
    inventory["host_vars"]["s2"]["spark_pair_rank"] = 0
    inventory["group_vars"]["all"]["vllm_tp2_service_api_key"] = ""
    return inventory


@pytest.mark.parametrize("playbook", CHANGING)
def test_a_bad_inventory_stops_the_playbook_in_its_check(
    runs: dict[str, Run], playbook: str
) -> None:
    result = runs[playbook]
    output = flat(result)
    assert result.returncode != 0, output
    plays = [line for line in output.splitlines() if line.startswith("PLAY [")]
    assert len(plays) == 1 and plays[0].startswith(f"PLAY [{CHECK_PLAY}]"), plays
    assert any(p.startswith("spark_pair_rank (s1, s2): is 0 on both") for p in problems(result))


def test_rollback_needs_the_release_named(runs: dict[str, Run]) -> None:
    result = runs["playbooks/rollback.yml"]
    assert result.returncode != 0, flat(result)
    refused = [p.split(":", 1)[0] for p in problems(result)]
    assert "rolling_update_release (s1, s2, s3, s4)" in refused, flat(result)
    # and nothing else but what bad_inventory() breaks on purpose
    assert refused == [
        "spark_pair_rank (s1, s2)",
        "vllm_tp2_service_api_key (s3)",
        "rolling_update_release (s1, s2, s3, s4)",
    ], flat(result)


@pytest.mark.parametrize("playbook", CHANGING)
def test_each_playbook_checks_only_what_it_runs(runs: dict[str, Run], playbook: str) -> None:
    """No API key: refused only where the service is configured (and no release named: refused
    only by rollback.yml); the two rank 0 nodes, by all."""
    refused = [p.split(" (", 1)[0] for p in problems(runs[playbook])]
    expected = ["spark_pair_rank"]
    if "api_key" in concerns_of(playbook):
        expected.append("vllm_tp2_service_api_key")
    if "rollback" in concerns_of(playbook):
        expected.append("rolling_update_release")
    assert refused == expected, flat(runs[playbook])


def test_a_second_check_in_the_same_run_checks_nothing_again(runs: dict[str, Run]) -> None:
    result = runs["twice"]
    output = flat(result)
    assert result.returncode == 0, output
    read = "TASK [inventory_check : Read the options of every role on the roles path"
    assert output.count(read) == 1, output
    assert output.count("TASK [inventory_check : Check what is left to check]") == 2, output


def test_the_check_can_be_turned_off(runs: dict[str, Run]) -> None:
    """-e '{"inventory_check_concerns": []}' leaves the roles' own checks alone to answer
    (tests/rail_network/test_bad_input.py runs network.yml so)."""
    result = runs["off"]
    assert result.returncode == 0, flat(result)
    assert "TASK [inventory_check : Read the options" not in flat(result)
