"""Bad rail inventory fails with a message naming the variable, and changes nothing on the hosts.

Each case runs the operator's playbooks/network.yml (for real, not in check mode) against a fresh
lab pair made by lab/labctl.py, with an inventory that is good but for one mistake. The playbook's
first play, the controller-side inventory check (roles/inventory_check, tested in
tests/inventory_check), refuses most of these before rail_network starts: it is turned off here
(inventory_check_concerns: []) so that the role's own validation, its defence in depth, is what
answers.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, output_of, run_tool

PREFIX = "dualspark-rail_network_bad_input"
HOSTS = ("spark-a", "spark-b")
TWIN_1, TWIN_2 = "enp1s0f1np1", "enP2p1s0f1np1"

Inventory = dict[str, Any]


def good_inventory() -> Inventory:
    def host(name: str, rank: int, last_octet: int) -> dict[str, Any]:
        return {
            "ansible_host": f"{PREFIX}-{name}",
            "spark_pair_rank": rank,
            "rail_network_addresses": {
                TWIN_1: f"192.168.100.{last_octet}",
                TWIN_2: f"192.168.101.{last_octet}",
            },
        }

    return {
        "dualspark": {
            "vars": {"ansible_connection": "community.docker.docker", "ansible_user": "root"},
            "children": {
                "lab_pair": {
                    "vars": {
                        "spark_pair_name": "lab_pair",
                        "rail_network_mtu": 9000,
                        "rail_network_twins": [
                            {"interface": TWIN_1, "subnet": "192.168.100.0/24"},
                            {"interface": TWIN_2, "subnet": "192.168.101.0/24"},
                        ],
                    },
                    "hosts": {"spark-a": host("spark-a", 0, 10), "spark-b": host("spark-b", 1, 11)},
                }
            },
        }
    }


def pair_vars(inventory: Inventory) -> dict[str, Any]:
    return inventory["dualspark"]["children"]["lab_pair"]["vars"]


def host_vars(inventory: Inventory, host: str) -> dict[str, Any]:
    return inventory["dualspark"]["children"]["lab_pair"]["hosts"][host]


def unaddressed_twin(inv: Inventory) -> None:
    del host_vars(inv, "spark-b")["rail_network_addresses"][TWIN_2]


def same_subnet_on_both_twins(inv: Inventory) -> None:
    pair_vars(inv)["rail_network_twins"][1]["subnet"] = "192.168.100.0/24"
    host_vars(inv, "spark-a")["rail_network_addresses"][TWIN_2] = "192.168.100.20"
    host_vars(inv, "spark-b")["rail_network_addresses"][TWIN_2] = "192.168.100.21"


def address_outside_subnet(inv: Inventory) -> None:
    host_vars(inv, "spark-a")["rail_network_addresses"][TWIN_1] = "192.168.200.10"


def address_with_prefix_length(inv: Inventory) -> None:
    host_vars(inv, "spark-a")["rail_network_addresses"][TWIN_1] = "192.168.100.10/24"


def duplicate_address(inv: Inventory) -> None:
    host_vars(inv, "spark-b")["rail_network_addresses"][TWIN_1] = "192.168.100.10"


def mtu_differs_between_ends(inv: Inventory) -> None:
    host_vars(inv, "spark-b")["rail_network_mtu"] = 4200


def unsupported_mtu(inv: Inventory) -> None:
    pair_vars(inv)["rail_network_mtu"] = 1500


def management_interface_as_twin(inv: Inventory) -> None:
    pair_vars(inv)["rail_network_twins"][0] = {"interface": "eth0", "subnet": "192.168.100.0/24"}
    for host in HOSTS:
        addresses = host_vars(inv, host)["rail_network_addresses"]
        addresses["eth0"] = addresses.pop(TWIN_1)


def subnets_disagree_between_ends(inv: Inventory) -> None:
    twins = copy.deepcopy(pair_vars(inv)["rail_network_twins"])
    twins[1]["subnet"] = "192.168.102.0/24"
    host_vars(inv, "spark-b")["rail_network_twins"] = twins
    host_vars(inv, "spark-b")["rail_network_addresses"][TWIN_2] = "192.168.102.11"


def rank_left_unset(inv: Inventory) -> None:
    del host_vars(inv, "spark-b")["spark_pair_rank"]


def peer_left_out_by_limit(inv: Inventory) -> None:
    """The inventory is right; the mistake is the --limit that leaves the peer out of the play."""


# (case, extra ansible-playbook arguments, fragments the failure message must contain)
CASES: list[tuple[Callable[[Inventory], None], tuple[str, ...], tuple[str, ...]]] = [
    (
        peer_left_out_by_limit,
        ("--limit", "spark-a"),
        ("spark-b (the peer of spark-a in lab_pair) is not in this play", "Run without --limit"),
    ),
    (
        unaddressed_twin,
        (),
        ("rail_network_addresses['enP2p1s0f1np1'] of spark-b is ''", "host_vars/spark-b/"),
    ),
    (
        same_subnet_on_both_twins,
        (),
        ("rail_network_twins[0].subnet", "never the same or overlapping subnet on both twins"),
    ),
    (
        address_outside_subnet,
        (),
        (
            "rail_network_addresses['enp1s0f1np1'] of spark-a is '192.168.200.10'",
            "192.168.100.0/24",
        ),
    ),
    (
        address_with_prefix_length,
        (),
        ("rail_network_addresses['enp1s0f1np1'] of spark-a", "(no prefix length)"),
    ),
    (
        duplicate_address,
        (),
        ("rail_network_addresses['enp1s0f1np1'] is 192.168.100.10 on both", "its own address"),
    ),
    (
        mtu_differs_between_ends,
        (),
        ("rail_network_mtu is", "but 4200 on spark-b", "Set one rail_network_mtu"),
    ),
    (unsupported_mtu, (), ("rail_network_mtu of spark-a is 1500", "use 9000")),
    (
        management_interface_as_twin,
        (),
        ("rail_network_twins[0].interface 'eth0'", "not the management interface"),
    ),
    (
        subnets_disagree_between_ends,
        (),
        ("rail_network_twins subnets differ between", "group_vars/lab_pair/"),
    ),
    (
        rank_left_unset,
        (),
        ("value of spark_pair_rank must be one of: 0, 1, got: -1",),
    ),
]


def docker_usable() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


@pytest.fixture(scope="module")
def lab_pair() -> Iterator[str]:
    if not docker_usable():
        pytest.skip("needs the Docker engine for the lab hosts (bin/setup starts it)")
    labctl = [str(REPO / ".venv/bin/python"), str(REPO / "lab/labctl.py")]
    up = run_tool(*labctl, "up", "--prefix", PREFIX, "--no-docker-socket", timeout=600)
    assert up.returncode == 0, output_of(up)
    yield PREFIX
    run_tool(*labctl, "down", "--prefix", PREFIX, timeout=300)


def host_state(host: str) -> str:
    """What the role would change: rail links, netplan and sysctl files, systemd-networkd."""
    script = (
        f"ip -json address show dev {TWIN_1}; ip -json address show dev {TWIN_2}; "
        "ls -l /etc/netplan /etc/sysctl.d; cat /etc/netplan/* 2>/dev/null; "
        "systemctl is-enabled systemd-networkd; systemctl is-active systemd-networkd; true"
    )
    result = subprocess.run(
        ["docker", "exec", f"{PREFIX}-{host}", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def changed_counts(output: str) -> dict[str, int]:
    return {
        host: int(count)
        for host, count in re.findall(r"^(spark-[ab])\s+:.*?changed=(\d+)", output, re.MULTILINE)
    }


def run_network_playbook(inventory_dir: Path, inventory: Inventory, *args: str) -> str:
    (inventory_dir / "hosts.yml").write_text(json.dumps(inventory), encoding="utf-8")
    result = run_tool(
        "env",
        "ANSIBLE_CALLBACK_RESULT_FORMAT=json",
        "ANSIBLE_NOCOLOR=1",
        "ansible-playbook",
        "-i",
        str(inventory_dir / "hosts.yml"),
        "-e",
        '{"inventory_check_concerns": []}',
        *args,
        "playbooks/network.yml",
        timeout=300,
    )
    assert result.returncode != 0, f"the playbook accepted the mistake:\n{output_of(result)}"
    return result.stdout + result.stderr


def assert_refused(output: str, fragments: tuple[str, ...]) -> None:
    flat = " ".join(output.split())
    tail = "\n".join(output.splitlines()[-200:])
    for fragment in fragments:
        assert fragment in flat, f"message lacks {fragment!r}:\n{tail}"
    counts = changed_counts(output)
    assert counts, f"no PLAY RECAP:\n{tail}"
    assert set(counts.values()) == {0}, f"changes reported: {counts}"


@pytest.mark.parametrize(
    ("mistake", "args", "fragments"), CASES, ids=lambda v: getattr(v, "__name__", None)
)
def test_bad_input_fails_before_any_change(lab_pair, tmp_path: Path, mistake, args, fragments):
    inventory = good_inventory()
    mistake(inventory)
    before = {host: host_state(host) for host in HOSTS}
    assert_refused(run_network_playbook(tmp_path, inventory, *args), fragments)
    assert {host: host_state(host) for host in HOSTS} == before


def test_other_netplan_file_with_a_rail_link_fails_before_any_change(lab_pair, tmp_path: Path):
    """An image's own netplan file that already configures a twin (netplan would merge both)."""
    container = f"{PREFIX}-spark-b"
    other = "/etc/netplan/01-cx7-dhcp.yaml"
    content = f"network:\n  version: 2\n  ethernets:\n    {TWIN_2}:\n      dhcp4: true\n"
    write = ["docker", "exec", "-i", container, "sh", "-c", f"cat > {other}; chmod 600 {other}"]
    subprocess.run(write, input=content, text=True, check=True)
    try:
        before = {host: host_state(host) for host in HOSTS}
        output = run_network_playbook(tmp_path, good_inventory())
        assert_refused(output, (other, "also define a rail interface", "/etc/netplan/60-dualspark"))
        assert {host: host_state(host) for host in HOSTS} == before
    finally:
        subprocess.run(["docker", "exec", container, "rm", "-f", other], check=True)
