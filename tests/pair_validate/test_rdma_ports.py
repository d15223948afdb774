"""pair_validate's RDMA port check (roles/pair_validate/tasks/rdma.yml) against a made-up sysfs:
only the devices behind the rail twins must be ACTIVE, since a Spark's second CX-7 port is often
uncabled. A stand-in ibv_devinfo (no RDMA hardware here) reports the RoCE path MTU."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, output_of, run_local_play

RAIL = {"rocep1s0f1": "enp1s0f1np1", "roceP2p1s0f1": "enP2p1s0f1np1"}
OFF_RAIL = {"rocep1s0f0": "enp1s0f0np0", "roceP2p1s0f0": "enP2p1s0f0np0"}


def sysfs(root: Path, states: dict[str, str]) -> None:
    for device, netdev in (RAIL | OFF_RAIL).items():
        (root / "class/infiniband" / device / "device/net" / netdev).mkdir(parents=True)
        port = root / "class/infiniband" / device / "ports/1"
        port.mkdir(parents=True)
        (port / "state").write_text(states.get(device, "4: ACTIVE") + "\n")


def validate_rdma(tmp_path: Path, states: dict[str, str]) -> tuple[int, str]:
    sysfs(tmp_path / "sys", states)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    devinfo = bin_dir / "ibv_devinfo"
    devinfo.write_text('#!/bin/sh\nprintf "\\t\\tactive_mtu:\\t\\t4096 (5)\\n"\n')
    devinfo.chmod(0o755)
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "pair_probe_sysfs_root": str(tmp_path / "sys"),
                "pair_probe_rdma_devices": sorted(RAIL | OFF_RAIL),
                "pair_probe_rdma_present": True,
                "pair_validate_rail_twins": [{"interface": netdev} for netdev in RAIL.values()],
                "pair_validate_rdma_active_mtu": 4096,
            },
            "tasks": [
                {"ansible.builtin.include_tasks": str(REPO / "roles/pair_validate/tasks/rdma.yml")},
                {"ansible.builtin.debug": {"msg": "RESULT {{ pair_validate_rdma_result }}"}},
            ],
        }
    ]
    result = run_local_play(tmp_path, play, f"PATH={bin_dir}:{REPO / '.venv/bin'}:/usr/bin:/bin")
    return result.returncode, output_of(result, 200)


def test_an_uncabled_port_off_the_rail_passes(tmp_path: Path) -> None:
    code, output = validate_rdma(tmp_path, {device: "1: DOWN" for device in OFF_RAIL})
    assert code == 0, output
    assert "RESULT ports ACTIVE with active_mtu 4096 on roceP2p1s0f1, rocep1s0f1" in output, output


@pytest.mark.parametrize("device", sorted(RAIL))
def test_a_rail_port_down_fails(tmp_path: Path, device: str) -> None:
    code, output = validate_rdma(tmp_path, {device: "1: DOWN"})
    assert code != 0, output
    assert f"{device}: 1 1: DOWN; a rail port is not ACTIVE" in output, output
