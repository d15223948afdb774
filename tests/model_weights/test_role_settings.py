"""The model_weights role's settings, expressions and NFS export, evaluated with Ansible's Templar.

The kernel NFS server cannot run in the lab's containers, so the export is checked here as text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.ansible_trust import trusted
from tests.conftest import REPO

ROLE = REPO / "roles/model_weights"
PROBE_OUTPUT = "4: enp1s0f1np1    inet 192.168.100.11/24 brd 192.168.100.255 scope global"


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def task_named(file: str, start: str) -> dict[str, Any]:
    (task,) = [t for t in load(ROLE / "tasks" / file) if t["name"].startswith(start)]
    return task


def evaluate(expression: str, variables: dict[str, Any]) -> Any:
    templar = Templar(loader=DataLoader(), variables=trusted(variables))
    return templar.template(trust_as_template(expression))


def test_every_default_has_an_argument_spec_and_the_same_value():
    defaults = load(ROLE / "defaults/main.yml")
    options = load(ROLE / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        if isinstance(value, str) and "{{" in value:
            continue  # looked up at run time (the token from the environment)
        assert options[name].get("default", value) == value, name


@pytest.mark.parametrize(
    ("inventory", "expected"),
    [
        ({"model_weights_copy_address": "10.0.0.5"}, "10.0.0.5"),
        ({"rail_network_master_address": "192.168.100.21"}, "192.168.100.21"),
        ({}, "192.168.100.11"),
        ({"model_weights_rail_probe": {"stdout": ""}}, ""),
    ],
    ids=["setting", "rail_network fact", "interface address", "none"],
)
def test_rail_address_prefers_the_setting_then_rail_network_then_the_interface(inventory, expected):
    task = task_named("layout.yml", "Choose this node's rail address")
    variables = {
        "model_weights_copy_address": "",
        "model_weights_rail_probe": {"stdout": PROBE_OUTPUT},
        **inventory,
    }
    expression = task["ansible.builtin.set_fact"]["model_weights_rail_address"]
    assert str(evaluate(expression, variables)).strip() == expected


@pytest.mark.parametrize(("rank", "source"), [(1, "spark-b"), (0, "spark-a")])
def test_source_node_follows_the_source_rank(rank, source):
    task = task_named("layout.yml", "Name this revision's paths")
    variables = {
        **task["vars"],
        "model_weights_root": "/var/lib/dualspark/models",
        "model_weights_repo_id": "org/model",
        "model_weights_revision": "a" * 40,
        "model_weights_source_rank": rank,
        "spark_pair_rank0_host": "spark-a",
        "spark_pair_rank1_host": "spark-b",
        "spark_pair_peer": "spark-b",
        "inventory_hostname": "spark-a",
    }
    facts = task["ansible.builtin.set_fact"]
    assert str(evaluate(facts["model_weights_source_host"], variables)).strip() == source
    target = "spark-a" if source == "spark-b" else "spark-b"
    assert str(evaluate(facts["model_weights_target_host"], variables)).strip() == target
    assert evaluate(facts["model_weights_revision_dir"], variables) == (
        "/var/lib/dualspark/models/org--model/" + "a" * 40
    )


def test_nfs_export_is_read_only_to_the_peers_rail_address_only():
    text = (ROLE / "templates/model_weights.exports.j2").read_text(encoding="utf-8")
    variables = {
        "ansible_managed": "Ansible managed",
        "inventory_hostname": "spark-02",
        "model_weights_root": "/var/lib/dualspark/models",
        "model_weights_target_host": "spark-01",
        "hostvars": {"spark-01": {"model_weights_rail_address": "192.168.100.10"}},
    }
    rendered = evaluate(text, variables)
    exports = [line for line in rendered.splitlines() if line and not line.startswith("#")]
    assert exports == [
        "/var/lib/dualspark/models 192.168.100.10(ro,sync,no_subtree_check,root_squash,secure)"
    ]


def test_nfs_mount_is_always_read_only():
    task = task_named("nfs.yml", "Mount the source node's model root")
    expression = task["ansible.posix.mount"]["opts"]
    options = evaluate(expression, {"model_weights_nfs_mount_options": "rw,hard,nconnect=8"})
    assert options.split(",") == ["ro", "hard", "nconnect=8"]
