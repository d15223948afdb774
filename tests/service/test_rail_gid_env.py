"""The unit's start-time GID discovery (roles/vllm_tp2_service/files/rail_gid_env.py) against
made-up sysfs trees shaped like a DGX Spark's: per RDMA device and port, gids/<i> and
gid_attrs/types/<i>, filled the way mlx5 fills them (link-local RoCE v1 and v2, then the rail
address's RoCE v1 and v2)."""

from __future__ import annotations

import ast
import importlib.util
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO

SCRIPT = REPO / "roles/vllm_tp2_service/files/rail_gid_env.py"
TWINS = {"rocep1s0f1": "192.168.100.10", "roceP2p1s0f1": "192.168.101.10"}
HCA = ",".join(TWINS)
LINK_LOCAL = "fe80:0000:0000:0000:4ebb:47ff:fe01:0203"
EMPTY = "0000:0000:0000:0000:0000:0000:0000:0000"


def mapped(ipv4: str) -> str:
    a, b, c, d = (int(part) for part in ipv4.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def add_gid(port: Path, index: int, gid: str, kind: str | None) -> None:
    (port / "gids").mkdir(parents=True, exist_ok=True)
    (port / "gid_attrs/types").mkdir(parents=True, exist_ok=True)
    (port / "gids" / str(index)).write_text(gid + "\n", encoding="utf-8")
    if kind is not None:  # the kernel refuses to read the type of an empty slot
        (port / "gid_attrs/types" / str(index)).write_text(kind + "\n", encoding="utf-8")


def device(sysfs: Path, name: str, address: str, v2_index: int = 3, port: int = 1) -> Path:
    """One RDMA device whose rail address's RoCE v2 GID sits at `v2_index` (3 on a fresh boot)."""
    port_dir = sysfs / "class/infiniband" / name / "ports" / str(port)
    add_gid(port_dir, 0, LINK_LOCAL, "IB/RoCE v1")
    add_gid(port_dir, 1, LINK_LOCAL, "RoCE v2")
    add_gid(port_dir, 2, mapped(address), "IB/RoCE v1")
    for empty in range(3, v2_index):
        add_gid(port_dir, empty, EMPTY, None)
    add_gid(port_dir, v2_index, mapped(address), "RoCE v2")
    return port_dir


def spark(sysfs: Path, v2_indexes: tuple[int, int] = (3, 3)) -> Path:
    for (name, address), index in zip(TWINS.items(), v2_indexes, strict=True):
        device(sysfs, name, address, index)
    return sysfs


@pytest.fixture(scope="module")
def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rail_gid_env", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(module)
    return module


def run(
    script: ModuleType,
    capsys: pytest.CaptureFixture[str],
    sysfs: Path,
    out: Path,
    addresses: tuple[str, ...] = tuple(TWINS.values()),
    hca: str = HCA,
) -> tuple[int, str, str]:
    argv = [arg for address in addresses for arg in ("--address", address)]
    code = script.main([*argv, "--hca", hca, "--out", str(out), "--sysfs-root", str(sysfs)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def env_lines(out: Path) -> list[str]:
    return out.read_text(encoding="utf-8").splitlines()


def test_fresh_boot_index_is_written_atomically_with_its_directory(script, capsys, tmp_path):
    out = tmp_path / "run/dualspark/vllm-tp2-rank0.rail.env"
    code, said, _ = run(script, capsys, spark(tmp_path / "sys"), out)
    assert code == 0
    lines = env_lines(out)
    assert lines[-1] == "NCCL_IB_GID_INDEX=3"
    assert lines[0].startswith("# NCCL_IB_GID_INDEX=3: the RoCE v2 GID of 192.168.100.10 on ")
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no temporary left
    assert "NCCL_IB_GID_INDEX=3" in said and str(out) in said


def test_after_a_peer_power_cycle_the_gid_at_slot_4_is_picked(script, capsys, tmp_path):
    """The reference deployment's finding: slot 3 left empty, the RoCE v2 GID rebuilt at 4."""
    out = tmp_path / "rail.env"
    out.write_text("NCCL_IB_GID_INDEX=3\n", encoding="utf-8")  # the previous start's
    code, _, _ = run(script, capsys, spark(tmp_path / "sys", (4, 4)), out)
    assert code == 0
    assert env_lines(out)[-1] == "NCCL_IB_GID_INDEX=4"


@pytest.mark.parametrize("make_class_dir", [False, True], ids=["absent", "empty"])
def test_without_rdma_only_a_comment_is_written(script, capsys, tmp_path, make_class_dir):
    sysfs = tmp_path / "sys"
    if make_class_dir:
        (sysfs / "class/infiniband").mkdir(parents=True)
    out = tmp_path / "rail.env"
    code, said, _ = run(script, capsys, sysfs, out, hca="")
    assert code == 0
    lines = env_lines(out)
    assert len(lines) == 1 and lines[0].startswith("# no RDMA device found under ")
    assert "no RDMA device found" in said


def test_without_rdma_a_named_hca_is_mentioned(script, capsys, tmp_path):
    code, said, _ = run(script, capsys, tmp_path / "sys", tmp_path / "rail.env")
    assert code == 0
    assert f"although NCCL_IB_HCA names {HCA}" in said


def test_no_gid_for_the_address_fails_naming_address_devices_and_fix(script, capsys, tmp_path):
    out = tmp_path / "rail.env"
    out.write_text("NCCL_IB_GID_INDEX=3\n", encoding="utf-8")
    sysfs = spark(tmp_path / "sys")
    code, _, err = run(script, capsys, sysfs, out, addresses=("192.168.100.99",))
    assert code == 4
    assert "no RoCE v2 GID carries 192.168.100.99 on rocep1s0f1, roceP2p1s0f1" in err
    assert "playbooks/network.yml" in err
    assert not out.exists()  # a failed start leaves no index behind


def test_an_address_with_only_a_roce_v1_gid_fails_saying_so(script, capsys, tmp_path):
    sysfs = tmp_path / "sys"
    port = sysfs / "class/infiniband/rocep1s0f1/ports/1"
    add_gid(port, 0, LINK_LOCAL, "RoCE v2")
    add_gid(port, 1, mapped("192.168.100.10"), "IB/RoCE v1")
    code, _, err = run(
        script, capsys, sysfs, tmp_path / "rail.env", ("192.168.100.10",), "rocep1s0f1"
    )
    assert code == 4
    assert "found only 192.168.100.10 as IB/RoCE v1 at rocep1s0f1 port 1 index 1" in err


def test_two_twins_agreeing_give_their_index(script, capsys, tmp_path):
    out = tmp_path / "rail.env"
    code, said, _ = run(script, capsys, spark(tmp_path / "sys", (5, 5)), out)
    assert code == 0
    assert env_lines(out)[-1] == "NCCL_IB_GID_INDEX=5"
    assert "192.168.101.10 on roceP2p1s0f1 port 1" in said


def test_two_twins_disagreeing_fail_naming_both_indexes(script, capsys, tmp_path):
    out = tmp_path / "rail.env"
    code, _, err = run(script, capsys, spark(tmp_path / "sys", (3, 4)), out)
    assert code == 5
    assert "192.168.100.10 at rocep1s0f1 port 1 index 3" in err
    assert "192.168.101.10 at roceP2p1s0f1 port 1 index 4" in err
    assert "one NCCL_IB_GID_INDEX for every HCA" in err
    assert not out.exists()


TWIN1 = ("192.168.100.10",)
BOTH = tuple(TWINS.values())


@pytest.mark.parametrize(
    ("hca", "addresses", "code", "index"),
    [
        # Only twin 1's device is NCCL's: twin 2's table (index 4 here) is not looked at.
        ("rocep1s0f1", TWIN1, 0, "3"),
        ("=rocep1s0f1:1", TWIN1, 0, "3"),
        ("^roceP2", TWIN1, 0, "3"),
        # A prefix, or no list at all, selects both devices, whose indexes differ.
        ("roce", BOTH, 5, None),
        ("", BOTH, 5, None),
        ("rocep1s0f1:2", TWIN1, 4, None),  # port 2 holds no GID
        ("mlx5_0", TWIN1, 3, None),
        ("^roce", TWIN1, 3, None),
        ("rocep1s0f1:x", TWIN1, 2, None),
    ],
)
def test_hca_selects_devices_as_nccl_does(script, capsys, tmp_path, hca, addresses, code, index):
    out = tmp_path / "rail.env"
    result, _, err = run(script, capsys, spark(tmp_path / "sys", (3, 4)), out, addresses, hca)
    assert result == code, err
    if index is None:
        assert not out.exists()
    else:
        assert env_lines(out)[-1] == f"NCCL_IB_GID_INDEX={index}"
    if code == 3:
        assert "not an RDMA device here" in err or "excludes every RDMA device" in err


def test_an_address_that_is_not_ipv4_is_a_usage_error(script, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--address", "192.168.100.10/24", "--out", str(tmp_path / "rail.env")])
    assert exit_info.value.code == 2
    assert "is not an IPv4 address" in capsys.readouterr().err


def test_an_unwritable_out_fails_with_its_own_status(script, capsys, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")
    code, _, err = run(script, capsys, spark(tmp_path / "sys"), blocker / "rail.env")
    assert code == 6
    assert f"cannot write {blocker / 'rail.env'}" in err


def test_runs_standalone_on_the_standard_library(tmp_path):
    imported = set()
    for node in ast.walk(ast.parse(SCRIPT.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    assert SCRIPT.stat().st_mode & stat.S_IXUSR
    out = tmp_path / "rail.env"
    sysfs = spark(tmp_path / "sys", (4, 4))
    argv = ["--address", "192.168.100.10", "--hca", "rocep1s0f1", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-I", str(SCRIPT), *argv, "--sysfs-root", str(sysfs)],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert env_lines(out)[-1] == "NCCL_IB_GID_INDEX=4"
