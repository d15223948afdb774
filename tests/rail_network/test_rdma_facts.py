"""The role's discover and facts tasks, run by Ansible on this machine against a stand-in sysfs.

Shows what the service receives where RDMA exists (no RDMA device exists on the test machines).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers import output_of, run_tool
from tests.rail_network.test_rdma_discovery import ADDRESSES, add_gid, mapped_gid, standin_sysfs

PLAYBOOK = """
- name: Discover and publish the rail facts
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    rail_network_sysfs_root: {sysfs}
    rail_network_plan:
      mtu: 9000
      twins: {twins}
  tasks:
    - name: Discover
      ansible.builtin.include_role:
        name: rail_network
        tasks_from: discover.yml
    - name: Publish
      ansible.builtin.include_role:
        name: rail_network
        tasks_from: facts.yml
    - name: Hand the facts to the test
      ansible.builtin.copy:
        dest: {out}
        mode: "0600"
        content: >-
          {{{{ {{'hca': rail_network_ib_hca, 'gid': rail_network_ib_gid_index,
                'rdma': rail_network_rdma_present, 'master': rail_network_master_address,
                'ifname': rail_network_socket_ifname}} | to_json }}}}
"""


def published_facts(tmp_path: Path, sysfs: Path) -> dict[str, object]:
    twins = [
        {"interface": i, "address": a, "subnet": a.rsplit(".", 1)[0] + ".0/24"}
        for i, a in ADDRESSES.items()
    ]
    out = tmp_path / "facts.json"
    playbook = tmp_path / "facts.yml"
    playbook.write_text(
        PLAYBOOK.format(sysfs=sysfs, twins=json.dumps(twins), out=out), encoding="utf-8"
    )
    result = run_tool(
        *("ansible-playbook", "-i", "localhost,", str(playbook)),
        *("-e", f"ansible_python_interpreter={sys.executable}"),
        timeout=300,
    )
    assert result.returncode == 0, output_of(result)
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.mark.parametrize("reshuffled", [False, True], ids=["same-index", "indexes-differ"])
def test_facts_with_rdma(tmp_path, reshuffled):
    sysfs = standin_sysfs(tmp_path / "sys", ADDRESSES)
    if reshuffled:
        port = sysfs / "class/infiniband/roceP2p1s0f1/ports/1"
        (port / "gid_attrs/types/3").write_text("IB/RoCE v1\n", encoding="utf-8")
        add_gid(port, 5, mapped_gid(ADDRESSES["enP2p1s0f1np1"]), "RoCE v2", "enP2p1s0f1np1")
    facts = published_facts(tmp_path, sysfs)
    assert facts == {
        "hca": "rocep1s0f1,roceP2p1s0f1",
        # One NCCL_IB_GID_INDEX serves every HCA: when the twins disagree, NCCL must pick.
        "gid": "" if reshuffled else "3",
        "rdma": True,
        "master": "192.168.100.10",
        "ifname": "enp1s0f1np1",
    }


def test_facts_without_rdma(tmp_path):
    sysfs = tmp_path / "sys"
    for interface in ADDRESSES:
        (sysfs / "class/net" / interface).mkdir(parents=True)
    facts = published_facts(tmp_path, sysfs)
    assert facts == {
        "hca": "",
        "gid": "",
        "rdma": False,
        "master": "192.168.100.10",
        "ifname": "enp1s0f1np1",
    }
