"""The node-side collector on a fake sysfs and procfs, and its refusal to report secrets."""

from __future__ import annotations

from pathlib import Path

import pair_doctor_collect as collect
from pair_doctor import checks
from pair_doctor.checks import Expectations
from pair_doctor.findings import Severity

from tests.pair_doctor.healthy_pair import healthy_pair


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def fake_roots(tmp_path: Path) -> tuple[Path, Path]:
    sysfs, procfs = tmp_path / "sys", tmp_path / "proc"
    write(sysfs / "class/net/enp1s0f1np1/mtu", "9000")
    write(sysfs / "class/net/enp1s0f1np1/operstate", "up")
    port = sysfs / "class/infiniband/rocep1s0f1/ports/1"
    write(port / "state", "4: ACTIVE")
    write(port / "link_layer", "Ethernet")
    gids = {
        "0": ("fe80:0000:0000:0000:4ebb:47ff:fe01:0203", "IB/RoCE v1"),
        "3": ("0000:0000:0000:0000:0000:ffff:c0a8:640a", "RoCE v2"),
        "4": ("0000:0000:0000:0000:0000:0000:0000:0000", ""),
        "10": ("0000:0000:0000:0000:0000:ffff:c0a8:650a", "RoCE v2"),
    }
    for index, (gid, kind) in gids.items():
        write(port / "gids" / index, gid)
        write(port / "gid_attrs/types" / index, kind)
        write(port / "gid_attrs/ndevs" / index, "enp1s0f1np1")
    (sysfs / "class/infiniband/rocep1s0f1/device/net/enp1s0f1np1").mkdir(parents=True)
    write(
        procfs / "meminfo",
        "MemTotal:       127535000 kB\nMemAvailable:   119000000 kB\nCmaTotal:              0 kB",
    )
    return sysfs, procfs


def test_rdma_gids_sorted_numerically_and_empty_ones_dropped(tmp_path: Path) -> None:
    sysfs, _ = fake_roots(tmp_path)
    seen = collect.rdma(sysfs)
    assert seen["present"] is True
    device = seen["devices"]["rocep1s0f1"]
    assert device["netdevs"] == ["enp1s0f1np1"]
    port = device["ports"]["1"]
    assert port["state"] == "4: ACTIVE"
    assert [gid["index"] for gid in port["gids"]] == [0, 3, 10]
    assert port["gids"][1] == {
        "index": 3,
        "gid": "0000:0000:0000:0000:0000:ffff:c0a8:640a",
        "type": "RoCE v2",
        "ndev": "enp1s0f1np1",
    }


def test_no_infiniband_class_means_no_rdma(tmp_path: Path) -> None:
    assert collect.rdma(tmp_path) == {"present": False, "devices": {}}


def test_meminfo_reports_cma_zero_and_absent(tmp_path: Path) -> None:
    _, procfs = fake_roots(tmp_path)
    memory = collect.meminfo(procfs)
    assert memory["CmaTotal_kb"] == 0
    assert memory["MemAvailable_kb"] == 119000000
    assert memory["CmaFree_kb"] is None


def test_meminfo_of_the_broken_cma_state_is_judged_an_error(tmp_path: Path) -> None:
    """/proc/meminfo as a Spark with Kexec HandOver on reports it: CmaFree above CmaTotal."""
    procfs = tmp_path / "proc"
    write(
        procfs / "meminfo",
        "MemTotal:       127598544 kB\nMemFree:        92274688 kB\n"
        "MemAvailable:   119000000 kB\nCmaTotal:              0 kB\nCmaFree:          940604 kB",
    )
    memory = collect.meminfo(procfs)
    assert (memory["CmaTotal_kb"], memory["CmaFree_kb"]) == (0, 940604)
    pair = healthy_pair()
    pair["spark-01"]["memory"] = memory
    (finding,) = [f for f in checks.cma(pair, Expectations()) if f.host == "spark-01"]
    assert finding.severity is Severity.ERROR
    assert "CmaFree 940604 kB is above CmaTotal 0 kB" in finding.summary


def test_interfaces_read_mtu_and_state(tmp_path: Path) -> None:
    sysfs, _ = fake_roots(tmp_path)
    seen = collect.interfaces(["enp1s0f1np1", "enP2p1s0f1np1"], sysfs)
    assert seen["enp1s0f1np1"]["mtu"] == 9000
    assert seen["enp1s0f1np1"]["operstate"] == "up"
    assert seen["enP2p1s0f1np1"]["present"] is False


def test_env_file_keeps_nccl_settings_and_drops_secrets(tmp_path: Path) -> None:
    env = tmp_path / "vllm.env"
    env.write_text(
        "NCCL_IB_GID_INDEX=3\nexport NCCL_IB_HCA='rocep1s0f1,roceP2p1s0f1'\n"
        "VLLM_API_KEY=very-secret\nNCCL_SECRET_TOKEN=x\nHF_TOKEN=y\n# comment\n",
        encoding="utf-8",
    )
    assert collect.env_file(env) == {
        "NCCL_IB_GID_INDEX": "3",
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
    }
    assert collect.env_file(tmp_path / "absent.env") is None


def test_unknown_unit_is_not_loaded() -> None:
    seen = collect.unit("dualspark-no-such-unit.service", log_lines=10)
    assert seen["loaded"] is False
    assert seen["active"] is False
    assert seen["nccl_log"] == []


def test_image_without_reference() -> None:
    assert collect.image("") == {"ref": "", "present": False}


def test_runtime_env_files_are_reported_apart_from_the_static_one(tmp_path: Path) -> None:
    static, runtime = tmp_path / "etc/vllm.env", tmp_path / "run/vllm-tp2-rank0.rail.env"
    write(static, "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1\nVLLM_API_KEY=very-secret")
    write(
        runtime,
        "# NCCL_IB_GID_INDEX=4: the RoCE v2 GID of ... (rail_gid_env.py)\nNCCL_IB_GID_INDEX=4",
    )
    gone = tmp_path / "run/gone.rail.env"
    seen = collect.collect(
        {
            "sysfs_root": str(tmp_path / "sys"),
            "proc_root": str(tmp_path / "proc"),
            "service_env_files": [str(static)],
            "service_runtime_env_files": [str(runtime), str(gone)],
        }
    )
    assert seen["service_env"] == {str(static): {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1"}}
    assert seen["service_runtime_env"] == {
        str(runtime): {"NCCL_IB_GID_INDEX": "4"},
        str(gone): None,
    }


def test_the_hang_signatures_and_the_nccl_mount_are_recognised() -> None:
    assert collect.HANG_LINE.search(
        "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12590)"
    )
    assert collect.HANG_LINE.search(
        "WARNING shm_broadcast.py:466] No available shared memory broadcast block found in 60 s"
    )
    assert not collect.HANG_LINE.search("NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0")
    exec_start = (
        "{ path=/usr/bin/docker ; argv[]=/usr/bin/docker run --mount "
        "type=bind,src=/usr/lib/aarch64-linux-gnu/libnccl.so.2,"
        "dst=/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2,readonly img ; }"
    )
    assert collect.SYSTEM_NCCL_MOUNT.search(exec_start)
    assert not collect.SYSTEM_NCCL_MOUNT.search(exec_start.replace("nvidia/nccl", "nvidia/cublas"))
