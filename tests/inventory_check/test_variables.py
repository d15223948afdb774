"""Variables that carry a role's prefix but that no role takes, and near misses of a role's
variable with a slip in the prefix: warned with the nearest known name, refused with
inventory_check_strict; names the roles set at run time and names allowed by the
inventory pass; names of a role's vars/main.yml do not.

Four runs, started together: the default (warnings) with a typo, a role variable and a typo on
the command line, each in its own world; -e inventory_check_strict=true with a typo, allowed names
and a group named like a variable, each in its own world; strict from the inventory; and -e
inventory_check_strict=false. -e sets a variable for every host, so it cannot vary per world."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from tests.inventory_check.conftest import (
    Inventory,
    Run,
    World,
    combine,
    flat,
    good_inventory,
    head,
    hosts_of,
    named_hosts,
    naming,
    problems,
    recap_hosts,
    start_playbook,
    tail,
    warnings,
    write_inventory,
)

TYPO = World("typo", 1)
ROLE_VARIABLE = World("role_variable", 2)
ALLOWED = World("allowed", 3)
GROUP_NAME = World("group_name", 4)
ALLOW = '{"inventory_check_allowed_variables": ["rail_network_site_label"]}'


def typo_inventory() -> Inventory:
    inventory = good_inventory()
    inventory["group_vars"]["pair_one"]["rail_network_mut"] = 9000
    inventory["host_vars"]["s4"]["vllm_tp2_service_drain_timeout"] = 30
    # a slip in the prefix itself: no role's prefix, one letter pair away from a role's variable
    inventory["group_vars"]["pair_one"]["rail_netwrok_mtu"] = 9000
    return inventory


def role_variable_inventory() -> Inventory:
    """vars/main.yml outranks the inventory: setting one there changes nothing."""
    inventory = good_inventory()
    inventory["group_vars"]["all"]["vllm_tp2_service_runtime_env_dir"] = "/run/elsewhere"
    return inventory


def allowed_inventory() -> Inventory:
    inventory = good_inventory()
    inventory["group_vars"]["all"]["site_note"] = "no role prefix: not ours to judge"
    inventory["group_vars"]["all"]["rail_network_site_label"] = "allowed below"
    # spark_pair publishes it; a later play of the run carries it in hostvars
    inventory["host_vars"]["s1"]["spark_pair_peer"] = "s2"
    # a site's own names, far from any role's variable
    inventory["group_vars"]["all"]["lab_cache"] = "/srv/lab"
    inventory["host_vars"]["s1"]["rail_switch_port"] = "swp7"
    return inventory


def group_name_inventory() -> Inventory:
    inventory = good_inventory()
    inventory["groups"]["rail_network_mut"] = {}
    return inventory


WORLDS = {
    "default": [(TYPO, typo_inventory()), (ROLE_VARIABLE, role_variable_inventory())],
    "strict": [
        (TYPO, typo_inventory()),
        (ALLOWED, allowed_inventory()),
        (GROUP_NAME, group_name_inventory()),
    ],
}


def hosts(world: World) -> list[str]:
    return [world.rename(host) for host in hosts_of(good_inventory())]


@pytest.fixture(scope="module")
def runs(pool: ThreadPoolExecutor, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    directory = tmp_path_factory.mktemp("variables")
    strict_in_inventory = good_inventory()
    strict_in_inventory["group_vars"]["all"]["inventory_check_strict"] = True
    strict_in_inventory["group_vars"]["all"]["model_weights_revison"] = "f" * 40
    started: dict[str, Future[Run]] = {
        "default": start_playbook(
            pool,
            write_inventory(directory / "default", combine(WORLDS["default"])),
            "-e",
            "rolling_update_releas=0.1.0-abc",
        ),
        "strict": start_playbook(
            pool,
            write_inventory(directory / "strict", combine(WORLDS["strict"])),
            "-e",
            ALLOW,
            "-e",
            "inventory_check_strict=true",
        ),
        "strict_in_inventory": start_playbook(
            pool, write_inventory(directory / "strict_in_inventory", strict_in_inventory)
        ),
        "strict_false": start_playbook(
            pool,
            write_inventory(directory / "strict_false", typo_inventory()),
            "-e",
            "inventory_check_strict=false",
        ),
    }
    return {name: future.result() for name, future in started.items()}


def test_a_typo_is_warned_with_the_nearest_name(runs: dict[str, Run]) -> None:
    result = runs["default"]
    output = flat(result)
    assert result.returncode == 0, tail(result)
    assert (
        f"[WARNING]: rail_network_mut ({TYPO.rename('s1, s2')}): carries the prefix of role "
        "rail_network but is none of its options" in output
    ), output
    assert "Fix: did you mean rail_network_mtu?" in output, output
    assert f"[WARNING]: vllm_tp2_service_drain_timeout ({TYPO.rename('s4')}): " in output, output
    assert "did you mean vllm_tp2_service_drain_timeout_s?" in output, output
    # the typo world's three, the role variable's and the command line's
    assert "msg: '5 variable(s) with a role''s prefix, or a near miss of one," in output, output


def test_the_warnings_are_those_and_no_more(runs: dict[str, Run]) -> None:
    """What the default run warns: one warning per problem, each naming its world's hosts (the
    command line's, every host of the run, in the order Ansible lists them)."""
    found = {
        head(warning).split(" ", 1)[0]: set(named_hosts(warning))
        for warning in warnings(runs["default"])
    }
    assert found == {
        "rail_network_mut": {*TYPO.rename("s1 s2").split()},
        "rail_netwrok_mtu": {*TYPO.rename("s1 s2").split()},
        "vllm_tp2_service_drain_timeout": {TYPO.rename("s4")},
        "vllm_tp2_service_runtime_env_dir": set(hosts(ROLE_VARIABLE)),
        "rolling_update_releas": {*hosts(TYPO), *hosts(ROLE_VARIABLE)},
    }, warnings(runs["default"])
    assert len(warnings(runs["default"])) == len(found), warnings(runs["default"])


def test_strict_refuses_a_typo(runs: dict[str, Run]) -> None:
    result = runs["strict"]
    assert result.returncode != 0, tail(result)
    found = problems(result)
    assert [head(message) for message in found] == [
        f"rail_network_mut ({TYPO.rename('s1, s2')})",
        f"rail_netwrok_mtu ({TYPO.rename('s1, s2')})",
        f"vllm_tp2_service_drain_timeout ({TYPO.rename('s4')})",
    ], found
    assert "did you mean rail_network_mtu?" in found[0]
    assert "is a near miss of rail_network_mtu" in found[1]
    assert "did you mean rail_network_mtu?" in found[1]


def test_strict_from_the_inventory(runs: dict[str, Run]) -> None:
    result = runs["strict_in_inventory"]
    assert result.returncode != 0, flat(result)
    assert problems(result)[0].startswith("model_weights_revison (s1, s2, s3, s4): "), flat(result)
    assert "did you mean model_weights_revision?" in problems(result)[0]


def test_a_typo_on_the_command_line_is_warned(runs: dict[str, Run]) -> None:
    result = runs["default"]
    assert result.returncode == 0, tail(result)
    assert "did you mean rolling_update_release?" in flat(result), flat(result)


def test_allowed_names_and_names_set_at_run_time_pass(runs: dict[str, Run]) -> None:
    """Strict, with rail_network_site_label allowed on the command line: nothing names the
    world's hosts (the typo world beside it is refused, test_strict_refuses_a_typo)."""
    result = runs["strict"]
    assert not naming(problems(result), hosts(ALLOWED)), problems(result)
    assert set(hosts(ALLOWED)) <= recap_hosts(result), tail(result)
    assert "[WARNING]" not in flat(result), warnings(result)


def test_a_role_variable_set_in_the_inventory_is_warned(runs: dict[str, Run]) -> None:
    result = runs["default"]
    assert result.returncode == 0, tail(result)
    everyone = ROLE_VARIABLE.rename("s1, s2, s3, s4")
    assert f"[WARNING]: vllm_tp2_service_runtime_env_dir ({everyone}): " in flat(result)


def test_group_names_are_not_variables(runs: dict[str, Run]) -> None:
    """Strict, with a group rail_network_mut: nothing names the world's hosts."""
    result = runs["strict"]
    assert not naming(problems(result), hosts(GROUP_NAME)), problems(result)
    assert set(hosts(GROUP_NAME)) <= recap_hosts(result), tail(result)
    assert "[WARNING]" not in flat(result), warnings(result)


def test_strict_false_on_the_command_line_only_warns(runs: dict[str, Run]) -> None:
    result = runs["strict_false"]
    assert result.returncode == 0, flat(result)
    assert "[WARNING]: rail_network_mut (s1, s2): " in flat(result), flat(result)
