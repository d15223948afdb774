"""The boot-time RDMA-CM unit, rendered by Ansible's templar for a stand-in discovery result."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from lab.labctl import IMAGE as LAB_IMAGE
from tests.rail_network.conftest import ROLE

# Stand-in for what rail_network_rdma reports on a Spark (no RDMA device on the test machines).
DISCOVERED = {
    "rdma_present": True,
    "twins": [
        {"interface": "enp1s0f1np1", "device": "rocep1s0f1", "port": 1, "gid_index": 3},
        {"interface": "enP2p1s0f1np1", "device": "roceP2p1s0f1", "port": 1, "gid_index": 3},
    ],
}


def render_unit() -> str:
    variables = {
        "ansible_managed": "Ansible managed",
        "rail_network_rdma": DISCOVERED,
        "rail_network_rdma_cm_roce_mode": "RoCE v2",
        "rail_network_configfs_root": "/sys/kernel/config",
        "rail_network_sysfs_root": "/sys",
    }
    source = (ROLE / "templates/rail-rdma-cm.service.j2").read_text(encoding="utf-8")
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(source))


def test_sets_roce_v2_on_each_rail_device():
    unit = render_unit()
    for device in ("rocep1s0f1", "roceP2p1s0f1"):
        assert f"ExecStart=/bin/mkdir -p /sys/kernel/config/rdma_cm/{device}\n" in unit
        assert (
            f"""ExecStart=/bin/sh -c 'echo "RoCE v2" > /sys/kernel/config/rdma_cm/{device}"""
            "/ports/1/default_roce_mode'\n"
        ) in unit
    assert "WantedBy=rdma-hw.target" in unit


def lab_image_present() -> bool:
    if shutil.which("docker") is None:
        return False
    inspect = ["docker", "image", "inspect", LAB_IMAGE]
    return subprocess.run(inspect, capture_output=True, check=False).returncode == 0


@pytest.mark.skipif(not lab_image_present(), reason="needs the lab image (lab/labctl.py image)")
def test_systemd_accepts_the_unit(tmp_path: Path):
    """Verified inside the lab image, which has rdma-core and kmod like a Spark."""
    path = tmp_path / "dualspark-rail-rdma-cm.service"
    path.write_text(render_unit(), encoding="utf-8")
    result = subprocess.run(
        [
            *("docker", "run", "--rm", "--network", "none", "-v", f"{path}:/tmp/{path.name}:ro"),
            *(LAB_IMAGE, "systemd-analyze", "verify", f"/tmp/{path.name}"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # Unknown keys and bad lines are only warnings: the unit's own lines must raise none.
    own_warnings = [line for line in result.stderr.splitlines() if path.name in line]
    assert result.returncode == 0, result.stderr
    assert not own_warnings, result.stderr
