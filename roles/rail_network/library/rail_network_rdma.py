#!/usr/bin/python
"""Find the RDMA device, port and RoCE v2 GID index behind each rail interface, from sysfs."""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: rail_network_rdma
short_description: Discover the RDMA device and RoCE v2 GID index of each rail interface
description:
  - Reads /sys/class/net/<interface>/device/infiniband/ for the RDMA device of each interface,
    then /sys/class/infiniband/<device>/ports/*/gids/*, gid_attrs/types/* and gid_attrs/ndevs/*
    for the RoCE v2 GID that carries the interface's IPv4 address.
  - Read-only; reports rdma_present false where /sys/class/infiniband is absent or empty.
options:
  twins:
    description: Rail interfaces with their IPv4 address (no prefix length).
    type: list
    elements: dict
    required: true
  sysfs_root:
    description: Root of sysfs.
    type: path
    default: /sys
"""

RETURN = r"""
rdma_present:
  description: Whether the host has any RDMA device.
  type: bool
twins:
  description: >-
    Per twin, in input order - interface, address, device (null when none), port, gid_index and
    gid (null when no RoCE v2 GID carries the address), port_state (e.g. ACTIVE).
  type: list
"""

ROCE_V2 = "RoCE v2"


@dataclass(frozen=True)
class TwinRdma:
    interface: str
    address: str
    device: str | None = None
    port: int | None = None
    gid_index: int | None = None
    gid: str | None = None
    port_state: str | None = None


def read_text(path: Path) -> str | None:
    """Content of a sysfs attribute, or None where it is absent or unreadable (unused GID slots)."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def rdma_devices(sysfs: Path) -> list[str]:
    class_dir = sysfs / "class/infiniband"
    return sorted(p.name for p in class_dir.iterdir()) if class_dir.is_dir() else []


def device_of_interface(sysfs: Path, interface: str) -> str | None:
    """The RDMA device on the same PCI function as the interface (mlx5: one per function)."""
    ib_dir = sysfs / "class/net" / interface / "device/infiniband"
    names = sorted(p.name for p in ib_dir.iterdir()) if ib_dir.is_dir() else []
    return names[0] if names else None


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return None
    return str(mapped) if mapped else None


def port_state(port_dir: Path) -> str | None:
    """'4: ACTIVE' in sysfs becomes 'ACTIVE'."""
    state = read_text(port_dir / "state")
    return state.split(":", 1)[-1].strip() if state else None


def find_roce_v2_gid(
    sysfs: Path, device: str, interface: str, address: str
) -> tuple[int, int, str] | None:
    """(port, GID index, GID) of the RoCE v2 GID carrying `address` on `interface`."""
    ports_dir = sysfs / "class/infiniband" / device / "ports"
    if not ports_dir.is_dir():
        return None
    for port_dir in sorted(ports_dir.iterdir(), key=lambda p: int(p.name)):
        gids_dir = port_dir / "gids"
        if not gids_dir.is_dir():
            continue
        for gid_file in sorted(gids_dir.iterdir(), key=lambda p: int(p.name)):
            gid = read_text(gid_file)
            if gid is None or gid_ipv4(gid) != address:
                continue
            attrs = port_dir / "gid_attrs"
            if read_text(attrs / "types" / gid_file.name) != ROCE_V2:
                continue
            ndev = read_text(attrs / "ndevs" / gid_file.name)
            if ndev not in (None, interface):
                continue
            return int(port_dir.name), int(gid_file.name), gid
    return None


def discover_twin(sysfs: Path, interface: str, address: str) -> TwinRdma:
    device = device_of_interface(sysfs, interface)
    if device is None:
        return TwinRdma(interface=interface, address=address)
    found = find_roce_v2_gid(sysfs, device, interface, address)
    if found is None:
        return TwinRdma(
            interface=interface,
            address=address,
            device=device,
            port=1,
            port_state=port_state(sysfs / "class/infiniband" / device / "ports/1"),
        )
    port, index, gid = found
    return TwinRdma(
        interface=interface,
        address=address,
        device=device,
        port=port,
        gid_index=index,
        gid=gid,
        port_state=port_state(sysfs / "class/infiniband" / device / "ports" / str(port)),
    )


def discover(sysfs: Path, twins: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "rdma_present": bool(rdma_devices(sysfs)),
        "twins": [asdict(discover_twin(sysfs, t["interface"], t["address"])) for t in twins],
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "twins": {"type": "list", "elements": "dict", "required": True},
            "sysfs_root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    twins = module.params["twins"]
    missing = [t for t in twins if not {"interface", "address"} <= set(t)]
    if missing:
        module.fail_json(msg=f"every twin needs 'interface' and 'address': {missing}")
    module.exit_json(changed=False, **discover(Path(module.params["sysfs_root"]), twins))


if __name__ == "__main__":
    main()
