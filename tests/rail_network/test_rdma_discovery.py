"""GID and device discovery against a stand-in sysfs tree shaped like a DGX Spark's (GB10, CX-7).

There is no RDMA device on the test machines, so the tree is built in tmp_path with the files the
kernel exposes: /sys/class/net/<if>/device/infiniband/<dev>, and per port gids/<n>,
gid_attrs/types/<n>, gid_attrs/ndevs/<n> and state.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.rail_network.conftest import ROLE

TWINS = (("enp1s0f1np1", "rocep1s0f1"), ("enP2p1s0f1np1", "roceP2p1s0f1"))
EMPTY_GID = "0000:0000:0000:0000:0000:0000:0000:0000"


def mapped_gid(ipv4: str) -> str:
    a, b, c, d = (int(x) for x in ipv4.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def add_gid(port: Path, index: int, gid: str, gid_type: str | None, ndev: str | None) -> None:
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True, exist_ok=True)
    (port / "gids" / str(index)).write_text(gid + "\n", encoding="utf-8")
    if gid_type is not None:
        (port / "gid_attrs/types" / str(index)).write_text(gid_type + "\n", encoding="utf-8")
    if ndev is not None:
        (port / "gid_attrs/ndevs" / str(index)).write_text(ndev + "\n", encoding="utf-8")


def standin_sysfs(root: Path, addresses: dict[str, str], state: str = "4: ACTIVE") -> Path:
    """A stand-in sysfs with both twins' RDMA devices; GID table as mlx5 fills it."""
    for interface, device in TWINS:
        (root / "class/net" / interface / "device/infiniband" / device).mkdir(parents=True)
        port = root / "class/infiniband" / device / "ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n", encoding="utf-8")
        # 0/1: link-local v1/v2; 2/3: the rail IPv4 as v1 then v2; 4: an unused slot.
        link_local = "fe80:0000:0000:0000:0000:0000:0000:0001"
        add_gid(port, 0, link_local, "IB/RoCE v1", interface)
        add_gid(port, 1, link_local, "RoCE v2", interface)
        add_gid(port, 2, mapped_gid(addresses[interface]), "IB/RoCE v1", interface)
        add_gid(port, 3, mapped_gid(addresses[interface]), "RoCE v2", interface)
        add_gid(port, 4, EMPTY_GID, None, None)
    return root


ADDRESSES = {"enp1s0f1np1": "192.168.100.10", "enP2p1s0f1np1": "192.168.101.10"}
REQUEST = [{"interface": i, "address": a} for i, a in ADDRESSES.items()]


def test_finds_device_and_roce_v2_gid_of_each_twin(rdma_module, tmp_path):
    result = rdma_module.discover(standin_sysfs(tmp_path, ADDRESSES), REQUEST)
    assert result["rdma_present"] is True
    assert [(t["interface"], t["device"], t["port"], t["gid_index"]) for t in result["twins"]] == [
        ("enp1s0f1np1", "rocep1s0f1", 1, 3),
        ("enP2p1s0f1np1", "roceP2p1s0f1", 1, 3),
    ]
    assert result["twins"][0]["gid"] == mapped_gid("192.168.100.10")
    assert {t["port_state"] for t in result["twins"]} == {"ACTIVE"}


def test_follows_the_gid_when_the_table_reshuffles(rdma_module, tmp_path):
    sysfs = standin_sysfs(tmp_path, ADDRESSES)
    port = sysfs / "class/infiniband/rocep1s0f1/ports/1"
    add_gid(port, 3, EMPTY_GID, None, None)
    (port / "gid_attrs/types/3").unlink()
    add_gid(port, 7, mapped_gid("192.168.100.10"), "RoCE v2", "enp1s0f1np1")
    twins = rdma_module.discover(sysfs, REQUEST)["twins"]
    assert twins[0]["gid_index"] == 7
    assert twins[1]["gid_index"] == 3


def test_ignores_roce_v1_and_other_addresses(rdma_module, tmp_path):
    sysfs = standin_sysfs(tmp_path, ADDRESSES)
    (sysfs / "class/infiniband/rocep1s0f1/ports/1/gid_attrs/types/3").write_text(
        "IB/RoCE v1\n", encoding="utf-8"
    )
    twins = rdma_module.discover(sysfs, REQUEST)["twins"]
    assert twins[0]["device"] == "rocep1s0f1"
    assert twins[0]["gid_index"] is None
    assert twins[0]["port_state"] == "ACTIVE"
    other = rdma_module.discover(sysfs, [{"interface": "enP2p1s0f1np1", "address": "10.0.0.1"}])
    assert other["twins"][0]["gid_index"] is None


def test_skips_gids_bound_to_another_netdev(rdma_module, tmp_path):
    sysfs = standin_sysfs(tmp_path, ADDRESSES)
    port = sysfs / "class/infiniband/rocep1s0f1/ports/1"
    (port / "gid_attrs/ndevs/3").write_text("enp1s0f0np0\n", encoding="utf-8")
    assert rdma_module.discover(sysfs, REQUEST)["twins"][0]["gid_index"] is None


def test_reports_a_port_that_is_down(rdma_module, tmp_path):
    sysfs = standin_sysfs(tmp_path, ADDRESSES, state="1: DOWN")
    assert {t["port_state"] for t in rdma_module.discover(sysfs, REQUEST)["twins"]} == {"DOWN"}


def test_without_rdma_reports_none_and_no_device(rdma_module, tmp_path):
    for interface in ADDRESSES:
        (tmp_path / "class/net" / interface).mkdir(parents=True)  # veth: no device/ link
    result = rdma_module.discover(tmp_path, REQUEST)
    assert result["rdma_present"] is False
    assert [t["device"] for t in result["twins"]] == [None, None]
    assert [t["gid_index"] for t in result["twins"]] == [None, None]


@pytest.mark.parametrize(
    ("gid", "expected"),
    [
        (mapped_gid("192.168.100.11"), "192.168.100.11"),
        ("fe80:0000:0000:0000:0000:0000:0000:0001", None),
        (EMPTY_GID, None),
        ("not-a-gid", None),
    ],
)
def test_gid_ipv4(rdma_module, gid, expected):
    assert rdma_module.gid_ipv4(gid) == expected


def test_runs_as_an_ansible_module(tmp_path):
    """The module file itself, run the way Ansible runs it (JSON args on stdin)."""
    sysfs = standin_sysfs(tmp_path / "sys", ADDRESSES)
    args = {"ANSIBLE_MODULE_ARGS": {"twins": REQUEST, "sysfs_root": str(sysfs)}}
    result = subprocess.run(
        [sys.executable, str(ROLE / "library/rail_network_rdma.py")],
        input=json.dumps(args),
        capture_output=True,
        text=True,
        check=False,
    )
    output = json.loads(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    assert output["changed"] is False
    assert [t["gid_index"] for t in output["twins"]] == [3, 3]
