"""A made-up sysfs and procfs of a Spark, laid out as the kernel lays them out: each twin's
netdev and RDMA device under its PCI function in devices/, reached through the class/net and
class/infiniband links, and procfs meminfo; with the nvidia-smi stand-in beside them.

The unit tests build it in a temporary directory. Run as a script, it puts the same tree on a lab
host (a container has no GB10, no RDMA device, and sees the VM's memory), where the lab inventory
points the Spark exporter, the memory watchdog and the update's soak at it, and changes the
MemAvailable they read there:

    python lab/spark_tree.py put --container dualspark-lab-spark-a
    python lab/spark_tree.py memory --container dualspark-lab-spark-b --available-gib 3
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the lab package from the repository
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lab import nvidia_smi_standin

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


def serving_meminfo(available_kib: int) -> str:
    """meminfo of a Spark that serves: some swap in use."""
    return meminfo(available_kib, swap_free_kib=12 * GIB_KIB)


def set_available(procfs: Path, available_kib: int) -> None:
    """Rewrite meminfo whole, as a reader sees the kernel's: never half a file."""
    temporary = procfs / ".meminfo.new"
    temporary.write_text(serving_meminfo(available_kib), encoding="utf-8")
    temporary.replace(procfs / "meminfo")


def build(root: Path) -> tuple[Path, Path]:
    """(sysfs, procfs) of a healthy Spark: both twins up at MTU 9000, ports ACTIVE, 100 GiB free."""
    sysfs, procfs = root / "sys", root / "proc"
    for number, twin in enumerate(TWINS):
        add_twin(sysfs, twin, number)
    procfs.mkdir(parents=True)
    set_available(procfs, 100 * GIB_KIB)
    return sysfs, procfs


# Where a lab host has the tree (the lab inventory's spark_exporter_*_root and
# memory_watchdog_procfs_root name it), and the Python that runs its nvidia-smi there.
LAB_ROOT = "/srv/lab-spark"
HOST_PYTHON = "/usr/bin/python3"


def _docker(*args: str, stdin: str | None = None) -> None:
    try:
        done = subprocess.run(
            ["docker", *args], input=stdin, capture_output=True, text=True, check=False
        )
    except FileNotFoundError as exc:
        raise RuntimeError("docker is not installed here: bin/setup installs it") from exc
    if done.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")


def put(container: str, root: str = LAB_ROOT) -> None:
    """The tree of a healthy Spark at ``root`` on the lab host, replacing what was there."""
    with tempfile.TemporaryDirectory(prefix="spark-tree-") as scratch:
        tree = Path(scratch) / "tree"
        tree.mkdir(mode=0o755)
        build(tree)
        nvidia_smi_standin.install(tree / "bin", python=HOST_PYTHON)
        _docker("exec", container, "rm", "-rf", root)
        _docker("exec", container, "mkdir", "-p", str(Path(root).parent))
        _docker("cp", f"{tree}/.", f"{container}:{root}")


def set_lab_available(container: str, available_gib: float, root: str = LAB_ROOT) -> None:
    """MemAvailable of the lab host's tree, meminfo rewritten whole (as set_available does)."""
    procfs = f"{root}/proc"
    text = serving_meminfo(int(available_gib * GIB_KIB))
    script = f"cat > {procfs}/.meminfo.new && mv -f {procfs}/.meminfo.new {procfs}/meminfo"
    _docker("exec", "-i", container, "sh", "-c", script, stdin=text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The made-up Spark tree on a lab host.")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = (("put", "lay the tree of a healthy Spark out"), ("memory", "set MemAvailable"))
    for name, text in commands:
        command = sub.add_parser(name, help=text)
        command.add_argument("--container", required=True, help="the lab host's container")
        command.add_argument("--root", default=LAB_ROOT, help=f"where the tree is ({LAB_ROOT})")
        if name == "memory":
            command.add_argument("--available-gib", type=float, required=True)
    args = parser.parse_args(argv)
    if args.command == "memory" and not args.available_gib >= 0:
        parser.error(f"--available-gib must be 0 or more ({args.available_gib})")
    try:
        if args.command == "put":
            put(args.container, args.root)
        else:
            set_lab_available(args.container, args.available_gib, args.root)
    except RuntimeError as exc:
        print(f"spark_tree: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
