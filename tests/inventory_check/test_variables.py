"""Variables that carry a role's prefix but that no role takes: warned with the nearest known name,
refused with inventory_check_strict; names the roles set at run time and names allowed by the
inventory pass; names of a role's vars/main.yml do not."""

from __future__ import annotations

from pathlib import Path

from tests.inventory_check.conftest import (
    flat,
    good_inventory,
    problems,
    run_playbook,
    write_inventory,
)


def typo_inventory(tmp_path: Path) -> Path:
    inventory = good_inventory()
    inventory["group_vars"]["pair_one"]["rail_network_mut"] = 9000
    inventory["host_vars"]["s4"]["vllm_tp2_service_drain_timeout"] = 30
    return write_inventory(tmp_path / "inventory", inventory)


def test_a_typo_is_warned_with_the_nearest_name(tmp_path: Path) -> None:
    result = run_playbook(typo_inventory(tmp_path))
    output = flat(result)
    assert result.returncode == 0, output
    assert (
        "[WARNING]: rail_network_mut (s1, s2): carries the prefix of role rail_network but is "
        "none of its options" in output
    ), output
    assert "Fix: did you mean rail_network_mtu?" in output, output
    assert "[WARNING]: vllm_tp2_service_drain_timeout (s4): " in output, output
    assert "did you mean vllm_tp2_service_drain_timeout_s?" in output, output
    assert "msg: '2 variable(s) with a role''s prefix" in output, output


def test_strict_refuses_a_typo(tmp_path: Path) -> None:
    result = run_playbook(typo_inventory(tmp_path), "-e", "inventory_check_strict=true")
    assert result.returncode != 0, flat(result)
    found = problems(result)
    assert [message.split(" (", 1)[0] for message in found] == [
        "rail_network_mut",
        "vllm_tp2_service_drain_timeout",
    ], found
    assert "did you mean rail_network_mtu?" in found[0]


def test_strict_from_the_inventory(tmp_path: Path) -> None:
    inventory = good_inventory()
    inventory["group_vars"]["all"]["inventory_check_strict"] = True
    inventory["group_vars"]["all"]["model_weights_revison"] = "f" * 40
    result = run_playbook(write_inventory(tmp_path / "inventory", inventory))
    assert result.returncode != 0, flat(result)
    assert problems(result)[0].startswith("model_weights_revison (s1, s2, s3, s4): "), flat(result)
    assert "did you mean model_weights_revision?" in problems(result)[0]


def test_a_typo_on_the_command_line_is_warned(tmp_path: Path) -> None:
    inventory = write_inventory(tmp_path / "inventory", good_inventory())
    result = run_playbook(inventory, "-e", "rolling_update_releas=0.1.0-abc")
    assert result.returncode == 0, flat(result)
    assert "did you mean rolling_update_release?" in flat(result), flat(result)


def test_allowed_names_and_names_set_at_run_time_pass(tmp_path: Path) -> None:
    inventory = good_inventory()
    inventory["group_vars"]["all"]["site_note"] = "no role prefix: not ours to judge"
    inventory["group_vars"]["all"]["rail_network_site_label"] = "allowed below"
    # spark_pair publishes it; a later play of the run carries it in hostvars
    inventory["host_vars"]["s1"]["spark_pair_peer"] = "s2"
    # a typo in the prefix itself carries no role's prefix
    inventory["group_vars"]["all"]["rail_netwrok_mtu"] = 9000
    result = run_playbook(
        write_inventory(tmp_path / "inventory", inventory),
        "-e",
        '{"inventory_check_allowed_variables": ["rail_network_site_label"]}',
        "-e",
        "inventory_check_strict=true",
    )
    assert result.returncode == 0, flat(result)
    assert "[WARNING]" not in flat(result), flat(result)


def test_a_role_variable_set_in_the_inventory_is_warned(tmp_path: Path) -> None:
    """vars/main.yml outranks the inventory: setting one there changes nothing."""
    inventory = good_inventory()
    inventory["group_vars"]["all"]["vllm_tp2_service_runtime_env_dir"] = "/run/elsewhere"
    result = run_playbook(write_inventory(tmp_path / "inventory", inventory))
    assert result.returncode == 0, flat(result)
    assert "[WARNING]: vllm_tp2_service_runtime_env_dir (s1, s2, s3, s4): " in flat(result)


def test_group_names_are_not_variables(tmp_path: Path) -> None:
    inventory = good_inventory()
    inventory["groups"]["rail_network_mut"] = {}
    path = write_inventory(tmp_path / "inventory", inventory)
    result = run_playbook(path, "-e", "inventory_check_strict=true")
    assert result.returncode == 0, flat(result)
    assert "[WARNING]" not in flat(result), flat(result)


def test_strict_false_on_the_command_line_only_warns(tmp_path: Path) -> None:
    result = run_playbook(typo_inventory(tmp_path), "-e", "inventory_check_strict=false")
    assert result.returncode == 0, flat(result)
    assert "[WARNING]: rail_network_mut (s1, s2): " in flat(result), flat(result)
