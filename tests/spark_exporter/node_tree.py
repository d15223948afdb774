"""A made-up sysfs and procfs of a Spark, laid out as the kernel lays them out: each twin's
netdev and RDMA device under its PCI function in devices/, reached through the class/net and
class/infiniband links, and procfs meminfo."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

GIB_KIB = 1 << 20


@dataclass(frozen=True)
class Twin:
    interface: str
    device: str
    pci: str


TWINS = (
    Twin("enp1s0f1np1", "rocep1s0f1", "pci0000:00/0000:01:00.1"),
    Twin("enP2p1s0f1np1", "roceP2p1s0f1", "pci0002:00/0002:01:00.1"),
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def add_twin(sysfs: Path, twin: Twin, number: int) -> None:
    function = sysfs / "devices" / twin.pci
    netdev = function / "net" / twin.interface
    write(netdev / "operstate", "up")
    write(netdev / "mtu", "9000")
    write(netdev / "statistics/tx_bytes", str(1_000_000 + number))
    write(netdev / "statistics/rx_bytes", str(2_000_000 + number))
    link(netdev / "device", "../../../" + function.name)
    port = function / "infiniband" / twin.device / "ports/1"
    write(port / "state", "4: ACTIVE")
    write(port / "rate", "200 Gb/sec (4X HDR)")
    write(port / "counters/port_xmit_data", str(250_000_000 + number))
    write(port / "counters/port_rcv_data", str(125_000_000 + number))
    link(function / "infiniband" / twin.device / "device", "../../../" + function.name)
    depth = "../../devices/" + twin.pci
    link(sysfs / "class/net" / twin.interface, f"{depth}/net/{twin.interface}")
    link(sysfs / "class/infiniband" / twin.device, f"{depth}/infiniband/{twin.device}")


def meminfo(available_kib: int, swap_total_kib: int = 16 * GIB_KIB, swap_free_kib: int = 0) -> str:
    return (
        "MemTotal:       127535000 kB\n"
        "MemFree:          2035000 kB\n"
        f"MemAvailable:   {available_kib:>10} kB\n"
        "Cached:           9000000 kB\n"
        f"SwapTotal:      {swap_total_kib:>10} kB\n"
        f"SwapFree:       {swap_free_kib:>10} kB\n"
        "CmaTotal:              0 kB\n"
    )


def set_available(procfs: Path, available_kib: int) -> None:
    """Rewrite meminfo whole, as a reader sees the kernel's: never half a file."""
    temporary = procfs / ".meminfo.new"
    temporary.write_text(meminfo(available_kib, swap_free_kib=12 * GIB_KIB), encoding="utf-8")
    temporary.replace(procfs / "meminfo")


def build(root: Path) -> tuple[Path, Path]:
    """(sysfs, procfs) of a healthy Spark: both twins up at MTU 9000, ports ACTIVE, 100 GiB free."""
    sysfs, procfs = root / "sys", root / "proc"
    for number, twin in enumerate(TWINS):
        add_twin(sysfs, twin, number)
    procfs.mkdir(parents=True)
    set_available(procfs, 100 * GIB_KIB)
    return sysfs, procfs
