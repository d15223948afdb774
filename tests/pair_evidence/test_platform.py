"""What a node runs on (kernel, GPU driver, RDMA firmware) from a made-up sysfs and procfs, the
record of a validated run, and what changed since; then the module in a play, as roles call it."""

from __future__ import annotations

import json
from pathlib import Path

from pair_evidence.platform import changes, platform, read_record

from tests.helpers import output_of
from tests.pair_evidence.module_play import run_module

BANNER = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  "
    "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:09:31 UTC 2025\n"
)


def spark(root: Path, *, driver: str = "580.95.05", firmware: str = "28.45.1020") -> Path:
    """A Spark's sysfs and procfs under root: two CX-7 RDMA devices and the NVIDIA module."""
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text("6.17.0-1008-nvidia\n")
    (root / "sys/module/nvidia").mkdir(parents=True)
    (root / "sys/module/nvidia/version").write_text(driver + "\n")
    for device in ("rocep1s0f1", "roceP2p1s0f1"):
        (root / "sys/class/infiniband" / device).mkdir(parents=True)
        (root / "sys/class/infiniband" / device / "fw_ver").write_text(firmware + "\n")
    return root


def read(root: Path) -> dict[str, object]:
    return platform(root / "sys", root / "proc")


def test_a_spark_reads_as_kernel_driver_and_each_devices_firmware(tmp_path: Path) -> None:
    assert read(spark(tmp_path)) == {
        "kernel": "6.17.0-1008-nvidia",
        "gpu_driver": "580.95.05",
        "rdma_firmware": {"roceP2p1s0f1": "28.45.1020", "rocep1s0f1": "28.45.1020"},
    }


def test_the_driver_comes_from_the_proc_banner_without_the_module_version(tmp_path: Path) -> None:
    root = spark(tmp_path)
    (root / "sys/module/nvidia/version").unlink()
    (root / "proc/driver/nvidia").mkdir(parents=True)
    (root / "proc/driver/nvidia/version").write_text(BANNER)
    assert read(root)["gpu_driver"] == "580.95.05"


def test_a_lab_host_has_no_driver_and_no_firmware(tmp_path: Path) -> None:
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.1.0-40-amd64\n")
    assert read(tmp_path) == {"kernel": "6.1.0-40-amd64", "gpu_driver": None, "rdma_firmware": {}}


def test_each_change_is_named_with_before_and_after(tmp_path: Path) -> None:
    before = read(spark(tmp_path / "before"))
    after = read(spark(tmp_path / "after", driver="580.105.08", firmware="28.46.1006"))
    assert changes(before, after) == [
        "gpu_driver 580.95.05 -> 580.105.08",
        "roceP2p1s0f1 firmware 28.45.1020 -> 28.46.1006",
        "rocep1s0f1 firmware 28.45.1020 -> 28.46.1006",
    ]
    assert changes(before, before) == []
    gone = {**before, "rdma_firmware": {"rocep1s0f1": "28.45.1020"}}
    assert changes(before, gone) == ["roceP2p1s0f1 firmware 28.45.1020 -> none"]


def test_a_missing_or_unreadable_record_is_none(tmp_path: Path) -> None:
    assert read_record(tmp_path / "absent.json") is None
    (tmp_path / "broken.json").write_text("{not json")
    assert read_record(tmp_path / "broken.json") is None
    (tmp_path / "list.json").write_text("[1]")
    assert read_record(tmp_path / "list.json") is None


def test_the_module_compares_the_node_with_its_record(tmp_path: Path) -> None:
    root = spark(tmp_path / "node", driver="580.105.08")
    record = tmp_path / "validated-platform.json"
    record.write_text(json.dumps(read(spark(tmp_path / "then"))))
    result, seen = run_module(
        tmp_path,
        "pair_platform",
        {"record": str(record), "sysfs_root": str(root / "sys"), "proc_root": str(root / "proc")},
    )
    assert result.returncode == 0, output_of(result)
    assert seen["since_validated"] == ["gpu_driver 580.95.05 -> 580.105.08"]
    assert seen["platform"]["gpu_driver"] == "580.105.08"
    assert seen["changed"] is False
