"""Made-up inventories for the inventory_check role, written to a temporary directory, and
playbooks/check.yml (or another playbook) run against them from the repository root.

One ansible-playbook run costs seconds, most of it per run, so the tests share runs: many made-up
inventories ("worlds": GOOD, or GOOD with one rule broken, under names of their own) go into one
inventory and one run, and each test asserts on the messages that name its world's hosts (the
role lists every problem in one failure, each message naming its hosts). A module starts its runs
together, as many at once as the machine has cores (start_playbook)."""

from __future__ import annotations

import copy
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.helpers import REPO, run_tool

DIGEST = "sha256:" + "0123456789abcdef" * 4
REVISION = "0123456789abcdef0123456789abcdef01234567"
API_KEY = "lab-key_0123456789~+/="  # 22 characters of the allowed set

Inventory = dict[str, Any]
Run = subprocess.CompletedProcess[str]

# Two pairs, as inventory/production lays one out: every rule holds.
GOOD: Inventory = {
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


def good_inventory() -> Inventory:
    return copy.deepcopy(GOOD)


def write_inventory(directory: Path, inventory: Inventory) -> Path:
    """hosts.yml, group_vars/<group>/main.yml and host_vars/<host>/main.yml under directory.
    The groups are children of dualspark; those inventory["parents"] lists (parent: [groups])
    are children of that parent instead, itself a child of dualspark."""
    directory.mkdir(parents=True, exist_ok=True)
    parent_of = {
        child: parent
        for parent, children in inventory.get("parents", {}).items()
        for child in children
    }
    tree: dict[str, Any] = {}
    for group, hosts in inventory["groups"].items():
        parent = parent_of.get(group)
        branch = tree if parent is None else tree.setdefault(parent, {"children": {}})["children"]
        branch[group] = {"hosts": hosts}
    hosts_yml = {"dualspark": {"children": tree}}
    (directory / "hosts.yml").write_text(
        yaml.safe_dump(hosts_yml, sort_keys=False), encoding="utf-8"
    )
    for kind in ("group_vars", "host_vars"):
        for name, variables in inventory[kind].items():
            path = directory / kind / name / "main.yml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(variables, sort_keys=False), encoding="utf-8")
    return directory


# --------------------------------------------------------------------------- several in one run

# GOOD's own names: its hosts, its pair groups and its subnets' first two octets.
_GOOD_NAMES = re.compile(r"\b(?:s[1-9]|pair_one|pair_two)\b|\b192\.168\.")


@dataclass(frozen=True)
class World:
    """A made-up inventory in GOOD's names (s1.., pair_one, pair_two, group_vars/all,
    192.168.x.y), placed beside others in one inventory under names of its own: host s1 is
    <name>_s1, group pair_one is <name>_pair_one, both pair groups are children of a group <name>
    that takes group_vars/all, and 192.168.x.y is 10.<number>.x.y, so that no two worlds share a
    host, a group or a subnet."""

    name: str
    number: int

    def rename(self, text: str) -> str:
        """GOOD's names in text (a value, an expected message) as this world's."""

        def new(match: re.Match[str]) -> str:
            old = match.group(0)
            return f"10.{self.number}." if old == "192.168." else f"{self.name}_{old}"

        return _GOOD_NAMES.sub(new, text)

    def renamed(self, value: Any) -> Any:
        """Every string in value (keys too) renamed."""
        if isinstance(value, str):
            return self.rename(value)
        if isinstance(value, dict):
            return {self.renamed(key): self.renamed(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.renamed(item) for item in value]
        return value


def hosts_of(inventory: Inventory) -> list[str]:
    """The inventory's hosts, in inventory order."""
    hosts = [host for members in inventory["groups"].values() for host in members]
    return list(dict.fromkeys([*hosts, *inventory["host_vars"]]))


def combine(worlds: Iterable[tuple[World, Inventory]]) -> Inventory:
    """One inventory holding each (world, inventory in GOOD's names), renamed."""
    combined: Inventory = {"groups": {}, "parents": {}, "group_vars": {}, "host_vars": {}}
    numbers: set[int] = set()
    for world, inventory in worlds:
        assert 0 <= world.number <= 255 and world.number not in numbers, world
        numbers.add(world.number)
        renamed = world.renamed(inventory)
        renamed["group_vars"][world.name] = renamed["group_vars"].pop("all", {})
        for key in ("groups", "group_vars", "host_vars"):
            clash = set(renamed[key]) & set(combined[key])
            assert not clash, (world, key, clash)
            combined[key].update(renamed[key])
        assert world.name not in combined["parents"], world
        combined["parents"][world.name] = list(renamed["groups"])
    text = yaml.safe_dump(combined)
    assert "192.168." not in text, "a subnet of GOOD's left in the combined inventory"
    return combined


# --------------------------------------------------------------------------- running

# As many ansible-playbook runs at once as the machine has cores (each is mostly one process).
JOBS = max(1, min(4, os.cpu_count() or 1))


def run_playbook(
    inventory: Path, *args: str, playbook: str = "playbooks/check.yml", env: tuple[str, ...] = ()
) -> Run:
    """ansible-playbook from the repository root (its ansible.cfg: roles path, callback)."""
    return run_tool("env", *env, "ansible-playbook", "-i", str(inventory), playbook, *args)


@pytest.fixture(scope="session")
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=JOBS) as executor:
        yield executor


def start_playbook(
    pool: ThreadPoolExecutor,
    inventory: Path,
    *args: str,
    playbook: str = "playbooks/check.yml",
    env: tuple[str, ...] = (),
) -> Future[Run]:
    """run_playbook in the pool: the result when .result() is asked for."""
    return pool.submit(run_playbook, inventory, *args, playbook=playbook, env=env)


# --------------------------------------------------------------------------- reading a run


def text_of(result: Run) -> str:
    return (result.stdout or "") + (result.stderr or "")


def flat(result: Run) -> str:
    """The run's output on one line per message, blanks collapsed."""
    return "\n".join(" ".join(line.split()) for line in text_of(result).splitlines())


# A line per host: the task results and the recap (hundreds of them in a shared run).
_PER_HOST = re.compile(r"^(?:(?:ok|skipping|changed): \[|\S+\s+: ok=)")


def tail(result: Run) -> str:
    """For an assertion's message: the exit status and the end of the output, without the lines
    per host."""
    lines = [line for line in text_of(result).splitlines() if not _PER_HOST.match(line)]
    return "\n".join([f"exit status {result.returncode}", *lines[-80:]])


def problems(result: Run) -> list[str]:
    """The messages of the refusal (one '- ' line each in the task's msg)."""
    text = text_of(result)
    block = text.split("msg: |-", 1)[1] if "msg: |-" in text else ""
    lines = [line.strip() for line in block.splitlines()]
    return [line[2:] for line in lines if line.startswith("- ")]


def warnings(result: Run) -> list[str]:
    """The run's warnings, one line each."""
    return re.findall(r"^\[WARNING\]: (.*)$", text_of(result), flags=re.MULTILINE)


_HEAD = re.compile(r"^(?P<variable>\S+) \((?P<hosts>[^)]*)\): ")


def named_hosts(message: str) -> list[str]:
    """The hosts a message names: 'variable (host, host): problem Fix: fix' (none where the
    message is not of that form, such as a warning of Ansible's own)."""
    match = _HEAD.match(message)
    return match["hosts"].split(", ") if match else []


def head(message: str) -> str:
    """'variable (hosts)' of a message."""
    return message.split(": ", 1)[0]


def naming(messages: Iterable[str], hosts: Iterable[str]) -> list[str]:
    """The messages that name any of the hosts."""
    wanted = set(hosts)
    return [message for message in messages if wanted & set(named_hosts(message))]


def recap_hosts(result: Run) -> set[str]:
    """The hosts of the run's PLAY RECAP: those the play ran for."""
    return set(re.findall(r"^(\S+)\s+: ok=", text_of(result), flags=re.MULTILINE))


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
