"""Made-up inventories for the inventory_check role, written to a temporary directory, and
playbooks/check.yml (or another playbook) run against them from the repository root."""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, output_of, run_tool

DIGEST = "sha256:" + "0123456789abcdef" * 4
REVISION = "0123456789abcdef0123456789abcdef01234567"
API_KEY = "lab-key_0123456789~+/="  # 22 characters of the allowed set

# Two pairs, as inventory/production lays one out: every rule holds.
GOOD: dict[str, Any] = {
    "groups": {
        "pair_one": {"s1": {"spark_pair_rank": 0}, "s2": {"spark_pair_rank": 1}},
        "pair_two": {"s3": {"spark_pair_rank": 0}, "s4": {"spark_pair_rank": 1}},
    },
    "group_vars": {
        "all": {
            "container_runtime_image": "registry.example/team/vllm:1.0",
            "container_runtime_image_digest": DIGEST,
            "model_weights_repo_id": "team/model",
            "model_weights_revision": REVISION,
            "vllm_tp2_service_api_key": API_KEY,
            "dualpath_overlay_keep_releases": 3,
        },
        "pair_one": {
            "spark_pair_name": "pair_one",
            "rail_network_twins": [
                {"interface": "enp1s0f1np1", "subnet": "192.168.100.0/24"},
                {"interface": "enP2p1s0f1np1", "subnet": "192.168.101.0/24"},
            ],
            "rail_network_mtu": 9000,
        },
        "pair_two": {
            "spark_pair_name": "pair_two",
            "rail_network_twins": [
                {"interface": "enp1s0f1np1", "subnet": "192.168.110.0/24"},
                {"interface": "enP2p1s0f1np1", "subnet": "192.168.111.0/24"},
            ],
            "rail_network_mtu": 9000,
        },
    },
    "host_vars": {
        f"s{number}": {
            "ansible_host": f"s{number}.example.internal",
            "rail_network_addresses": {
                "enp1s0f1np1": f"192.168.{base}.{10 + offset}",
                "enP2p1s0f1np1": f"192.168.{base + 1}.{10 + offset}",
            },
        }
        for number, base, offset in ((1, 100, 0), (2, 100, 1), (3, 110, 0), (4, 110, 1))
    },
}


def good_inventory() -> dict[str, Any]:
    return copy.deepcopy(GOOD)


def write_inventory(directory: Path, inventory: dict[str, Any]) -> Path:
    """hosts.yml, group_vars/<group>/main.yml and host_vars/<host>/main.yml under directory."""
    directory.mkdir(parents=True, exist_ok=True)
    hosts = {"dualspark": {"children": {g: {"hosts": h} for g, h in inventory["groups"].items()}}}
    (directory / "hosts.yml").write_text(yaml.safe_dump(hosts, sort_keys=False), encoding="utf-8")
    for kind in ("group_vars", "host_vars"):
        for name, variables in inventory[kind].items():
            path = directory / kind / name / "main.yml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(variables, sort_keys=False), encoding="utf-8")
    return directory


def run_playbook(
    inventory: Path, *args: str, playbook: str = "playbooks/check.yml", env: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """ansible-playbook from the repository root (its ansible.cfg: roles path, callback)."""
    return run_tool("env", *env, "ansible-playbook", "-i", str(inventory), playbook, *args)


def flat(result: subprocess.CompletedProcess[str]) -> str:
    """The run's output on one line per message, blanks collapsed."""
    return "\n".join(" ".join(line.split()) for line in output_of(result, 400).splitlines())


def problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The messages of the refusal (one '- ' line each in the task's msg)."""
    text = output_of(result, 400)
    block = text.split("msg: |-", 1)[1] if "msg: |-" in text else ""
    lines = [line.strip() for line in block.splitlines()]
    return [line[2:] for line in lines if line.startswith("- ")]


@pytest.fixture(scope="session")
def rules() -> ModuleType:
    """The role's filter plugin, imported as a module."""
    path = REPO / "roles/inventory_check/filter_plugins/inventory_check.py"
    spec = importlib.util.spec_from_file_location("inventory_check_rules", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module
