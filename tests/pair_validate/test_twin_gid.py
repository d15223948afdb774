"""pair_validate's RoCE v2 GID lookup (roles/pair_validate/tasks/twin_gid.yml), which gives
ib_write_bw its device, port and GID index, against a made-up sysfs: the GID must carry the twin's
rail address and be RoCE v2 (each address has a RoCE v1 GID beside it)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import REPO, output_of, run_local_play

TWIN = "enp1s0f1np1"
DEVICE = "rocep1s0f1"
ADDRESS = "10.0.0.1"
V4_MAPPED = "0000:0000:0000:0000:0000:ffff:0a00:0001"
LINK_LOCAL = "fe80:0000:0000:0000:0000:0000:0000:0001"
FOUND = " ".join(f"{{{{ pair_validate_twin_rdma.{key} }}}}" for key in ("device", "port", "gid"))


def sysfs(root: Path, gids: dict[int, tuple[str, str]], port: str = "1") -> None:
    (root / "class/net" / TWIN / "device/infiniband" / DEVICE).mkdir(parents=True)
    port_dir = root / "class/infiniband" / DEVICE / "ports" / port
    (port_dir / "gids").mkdir(parents=True)
    (port_dir / "gid_attrs/types").mkdir(parents=True)
    for index, (gid, kind) in gids.items():
        (port_dir / "gids" / str(index)).write_text(gid + "\n")
        (port_dir / "gid_attrs/types" / str(index)).write_text(kind + "\n")


def find_gid(tmp_path: Path) -> tuple[int, str]:
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "pair_probe_sysfs_root": str(tmp_path / "sys"),
                "pair_validate_twin": {"interface": TWIN},
                "rail_network_addresses": {TWIN: ADDRESS},
            },
            "tasks": [
                {
                    "ansible.builtin.include_tasks": str(
                        REPO / "roles/pair_validate/tasks/twin_gid.yml"
                    )
                },
                {"ansible.builtin.debug": {"msg": f"FOUND {FOUND}"}},
            ],
        }
    ]
    result = run_local_play(tmp_path, play)
    return result.returncode, output_of(result, 200)


def test_the_roce_v2_gid_of_the_rail_address_is_found(tmp_path: Path) -> None:
    sysfs(
        tmp_path / "sys",
        {
            0: (LINK_LOCAL, "IB/RoCE v1"),
            1: (LINK_LOCAL, "RoCE v2"),
            2: (V4_MAPPED, "IB/RoCE v1"),
            3: (V4_MAPPED, "RoCE v2"),
        },
    )
    code, output = find_gid(tmp_path)
    assert code == 0, output
    assert f"FOUND {DEVICE} 1 3" in output, output


def test_the_port_is_read_not_assumed(tmp_path: Path) -> None:
    sysfs(tmp_path / "sys", {0: (V4_MAPPED, "IB/RoCE v1"), 1: (V4_MAPPED, "RoCE v2")}, port="2")
    code, output = find_gid(tmp_path)
    assert code == 0, output
    assert f"FOUND {DEVICE} 2 1" in output, output


def test_an_address_with_only_a_roce_v1_gid_fails_saying_so(tmp_path: Path) -> None:
    sysfs(tmp_path / "sys", {0: (LINK_LOCAL, "RoCE v2"), 1: (V4_MAPPED, "IB/RoCE v1")})
    code, output = find_gid(tmp_path)
    assert code != 0, output
    assert f"no RoCE v2 GID carries {ADDRESS} on {DEVICE}" in output, output


def test_a_twin_without_an_rdma_device_fails_saying_so(tmp_path: Path) -> None:
    (tmp_path / "sys/class/net" / TWIN / "device").mkdir(parents=True)
    code, output = find_gid(tmp_path)
    assert code != 0, output
    assert f"{TWIN} has no RDMA device" in output, output
