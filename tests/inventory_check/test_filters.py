"""The role's filter plugin as plain Python: reading role interfaces from a roles path, the
hosts in scope, unknown variables, and one message per problem however many hosts carry it."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import yaml

from tests.helpers import REPO


def make_role(base: Path, name: str, options: dict[str, object], tasks: object = None) -> None:
    spec = {"argument_specs": {"main": {"short_description": name, "options": options}}}
    (base / name / "meta").mkdir(parents=True)
    (base / name / "meta/argument_specs.yml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    if tasks is not None:
        (base / name / "tasks").mkdir()
        (base / name / "tasks/main.yml").write_text(yaml.safe_dump(tasks), encoding="utf-8")


def test_the_repository_roles_and_what_their_tasks_set(rules: ModuleType) -> None:
    roles = rules.role_interfaces([str(REPO / "roles")])
    on_disk = {path.parent.parent.name for path in REPO.glob("roles/*/meta/argument_specs.yml")}
    assert set(roles) == on_disk
    assert "rail_network_mtu" in roles["rail_network"]["options"]
    assert roles["rail_network"]["options"]["rail_network_mtu"] == {"type": "int", "default": 9000}
    # an option of an entry point other than main counts
    assert "rolling_update_release" in roles["rolling_update"]["options"]
    assert {"spark_pair_peer", "spark_pair_rank0_host"} <= set(roles["spark_pair"]["runtime"])
    assert "rail_network_plan" in roles["rail_network"]["runtime"]  # set_fact in validate.yml
    assert "container_runtime_info" in roles["container_runtime"]["runtime"]  # a register
    # vars/main.yml is neither
    assert "vllm_tp2_service_marlin_selectors" not in roles["vllm_tp2_service"]["options"]
    assert "vllm_tp2_service_marlin_selectors" not in roles["vllm_tp2_service"]["runtime"]


def test_the_first_role_of_a_name_on_the_path_wins(rules: ModuleType, tmp_path: Path) -> None:
    make_role(tmp_path / "first", "demo", {"demo_a": {"type": "str"}})
    make_role(tmp_path / "second", "demo", {"demo_b": {"type": "str"}})
    (tmp_path / "second/no_spec").mkdir()
    roles = rules.role_interfaces(f"{tmp_path / 'first'}:{tmp_path / 'second'}:/nonexistent")
    assert list(roles) == ["demo"]
    assert list(roles["demo"]["options"]) == ["demo_a"]


def test_names_set_in_blocks_and_loops_are_found(rules: ModuleType, tmp_path: Path) -> None:
    tasks = [
        {
            "block": [
                {"ansible.builtin.set_fact": {"demo_fact": 1, "cacheable": False}},
                {"ansible.builtin.command": "true", "register": "demo_result"},
            ],
            "rescue": [{"set_fact": {"demo_failed": True}}],
        }
    ]
    make_role(tmp_path, "demo", {}, tasks)
    assert rules.role_interfaces([str(tmp_path)])["demo"]["runtime"] == [
        "demo_fact",
        "demo_failed",
        "demo_result",
    ]


def test_the_longest_role_prefix_owns_a_name(rules: ModuleType, tmp_path: Path) -> None:
    make_role(tmp_path, "pair", {"pair_size": {"type": "int"}})
    make_role(tmp_path, "pair_probe", {"pair_probe_timeout": {"type": "int"}})
    roles = rules.role_interfaces([str(tmp_path)])
    hostvars = {"h1": {"pair_probe_timout": 3, "pair_size": 2, "pairing": 1}}
    found = rules.unknown_variables(hostvars, ["h1"], roles)
    assert len(found) == 1, found
    assert found[0].startswith("pair_probe_timout (h1): carries the prefix of role pair_probe")
    assert "did you mean pair_probe_timeout?" in found[0]


def test_one_message_per_problem_listing_every_host(rules: ModuleType, tmp_path: Path) -> None:
    make_role(tmp_path, "demo", {"demo_size": {"type": "int"}})
    roles = rules.role_interfaces([str(tmp_path)])
    hostvars = {"h1": {"demo_sise": 1}, "h2": {"demo_sise": 1}, "h3": {"demo_wxyzqwxyzq": 1}}
    found = rules.unknown_variables(hostvars, ["h1", "h2", "h3"], roles)
    assert [message.split(":", 1)[0] for message in found] == [
        "demo_sise (h1, h2)",
        "demo_wxyzqwxyzq (h3)",
    ]
    assert "did you mean" not in found[1] and "check demo's README" in found[1]
    assert rules.unknown_variables(hostvars, ["h3"], roles, ["demo_wxyzqwxyzq"]) == []


def test_scope_adds_each_play_host_s_peer(rules: ModuleType) -> None:
    groups = {"p1": ["a", "b"], "p2": ["c", "d"], "big": ["e", "f", "g"]}
    hostvars = {
        "a": {"spark_pair_name": "p1"},
        "c": {"spark_pair_name": "p2"},
        "e": {"spark_pair_name": "big"},
        "x": {},
    }
    assert rules.scope(hostvars, ["a", "e", "x"], groups) == ["a", "b", "e", "x"]
    assert rules.scope(hostvars, ["c"], groups) == ["c", "d"]
    # in inventory order, whichever host the play was limited to
    hostvars["b"] = {"spark_pair_name": "p1"}
    assert rules.scope(hostvars, ["b"], groups | {"all": ["a", "b", "c", "d"]}) == ["a", "b"]


def test_an_unknown_concern_is_an_error(rules: ModuleType) -> None:
    try:
        rules.rule({}, "firewall", [], {}, {})
    except ValueError as error:
        assert "firewall" in str(error)
    else:
        raise AssertionError("an unknown concern passed")
