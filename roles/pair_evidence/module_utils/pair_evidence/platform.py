"""What a Spark's rail and GPU run on: the kernel, the GPU driver and each RDMA device's firmware,
read from procfs and sysfs without root. A validated run records it on the node; the doctor tells
what changed since (a firmware update that put the MTU back at 1500, a driver that moved GIDs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    return text or None


def gpu_driver(sysfs: Path, procfs: Path) -> str | None:
    """The loaded NVIDIA kernel module's version (what nvidia-smi calls the driver version)."""
    version = _read(sysfs / "module/nvidia/version")
    if version:
        return version
    banner = _read(procfs / "driver/nvidia/version") or ""
    # "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.95.05  Release Build ..."
    words = [word for word in banner.split() if word[:1].isdigit() and "." in word]
    return words[0] if words else None


def rdma_firmware(sysfs: Path) -> dict[str, str]:
    root = sysfs / "class/infiniband"
    if not root.is_dir():
        return {}
    found = {}
    for device in sorted(root.iterdir()):
        version = _read(device / "fw_ver")
        if version:
            found[device.name] = version
    return found


def platform(sysfs: Path = Path("/sys"), procfs: Path = Path("/proc")) -> dict[str, Any]:
    return {
        "kernel": _read(procfs / "sys/kernel/osrelease"),
        "gpu_driver": gpu_driver(sysfs, procfs),
        "rdma_firmware": rdma_firmware(sysfs),
    }


def read_record(path: Path) -> dict[str, Any] | None:
    """The platform a validated run recorded, or None where none was (or it is unreadable)."""
    text = _read(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def changes(recorded: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each difference, as 'what: before -> now'."""
    found = []
    for key in ("kernel", "gpu_driver"):
        if recorded.get(key) != now.get(key):
            found.append(f"{key} {recorded.get(key) or 'none'} -> {now.get(key) or 'none'}")
    before, after = recorded.get("rdma_firmware") or {}, now.get("rdma_firmware") or {}
    for device in sorted(set(before) | set(after)):
        if before.get(device) != after.get(device):
            found.append(
                f"{device} firmware {before.get(device) or 'none'} -> {after.get(device) or 'none'}"
            )
    return found
