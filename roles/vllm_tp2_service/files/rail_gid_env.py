#!/usr/bin/env python3
"""Write the rail's RoCE v2 GID index to an env file, at each start of the service.

The service unit runs this as ExecStartPre on the node (standard library only: it is copied
there and run by the node's python3), and the container reads the file as an --env-file:

    rail_gid_env.py --address 192.168.100.10 --address 192.168.101.10 \\
        --hca rocep1s0f1,roceP2p1s0f1 --out /run/dualspark/vllm-tp2-rank0.rail.env

GID tables reshuffle after link or firmware events (a peer's power cycle has moved the rail's
RoCE v2 GID from slot 3 to 4), so the index is read from sysfs at every start instead of being
pinned: for each --address, the RoCE v2 GID (gid_attrs/types/<i> is "RoCE v2") whose
IPv4-mapped address (::ffff:a.b.c.d) is that address, on the devices --hca selects (NCCL_IB_HCA
syntax: `^` excludes, `=` matches names exactly, else by prefix; `:<port>` picks a port; empty
means every device). NCCL takes one NCCL_IB_GID_INDEX for every HCA, so the index must be the
same for all addresses.

Exit status:
  0  env file written: NCCL_IB_GID_INDEX=<index>, or, with no RDMA device at all, only a comment
     (NCCL then chooses; the lab has no RDMA)
  2  usage: a bad argument (e.g. an address that is not IPv4, a port that is not a number)
  3  an NCCL_IB_HCA entry matches no RDMA device here
  4  no RoCE v2 GID carries an address
  5  the addresses' RoCE v2 GIDs sit at different indexes
  6  the env file cannot be written
On any failure the env file is removed, so the container never starts on an index found earlier.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROCE_V2 = "RoCE v2"
KEY = "NCCL_IB_GID_INDEX"
FIX = (
    "check the rail address on the rail interfaces (`ip -4 addr`, rail_network_addresses in the "
    "inventory) and that the link is up, then run playbooks/network.yml"
)

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_HCA_MISSING = 3
EXIT_NO_GID = 4
EXIT_DISAGREE = 5
EXIT_WRITE = 6


class DiscoveryError(Exception):
    """Discovery failed; the message says what, where and the fix."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Selected:
    """An RDMA device NCCL_IB_HCA selects, with the one port it names (None: every port)."""

    device: str
    port: int | None = None


@dataclass(frozen=True)
class Gid:
    address: str
    device: str
    port: int
    index: int
    kind: str | None

    def where(self) -> str:
        return f"{self.device} port {self.port} index {self.index}"


def read(path: Path) -> str | None:
    """A sysfs attribute, or None where it is absent or unreadable (empty GID slots)."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return None


def numbered(directory: Path) -> list[Path]:
    """The entries of a sysfs directory named by numbers, in numeric order."""
    if not directory.is_dir():
        return []
    return sorted((p for p in directory.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def gid_ipv4(gid: str) -> str | None:
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
    try:
        mapped = ipaddress.IPv6Address(gid).ipv4_mapped
    except ValueError:
        return None
    return str(mapped) if mapped else None


def rdma_devices(sysfs: Path) -> list[str]:
    class_dir = sysfs / "class/infiniband"
    return sorted(p.name for p in class_dir.iterdir()) if class_dir.is_dir() else []


def select_devices(spec: str, devices: list[str]) -> list[Selected]:
    """The devices and ports NCCL would use for NCCL_IB_HCA=`spec` (every device when empty)."""
    text = spec.strip()
    exclude = text.startswith("^")
    text = text.removeprefix("^")
    exact = text.startswith("=")
    text = text.removeprefix("=")
    entries: list[tuple[str, int | None]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, port = item.partition(":")
        if port and not port.isdigit():
            raise DiscoveryError(f"--hca entry {item!r}: the port must be a number", EXIT_USAGE)
        entries.append((name, int(port) if port else None))

    def matches(device: str, name: str) -> bool:
        return device == name if exact else device.startswith(name)

    if not entries:
        return [Selected(device) for device in devices]
    if exclude:
        kept = [d for d in devices if not any(matches(d, name) for name, _ in entries)]
        if not kept:
            raise DiscoveryError(
                f"NCCL_IB_HCA={spec} excludes every RDMA device here ({', '.join(devices)}); "
                "name the rail's devices in NCCL_IB_HCA (rail_network_ib_hca)",
                EXIT_HCA_MISSING,
            )
        return [Selected(device) for device in kept]
    selected: list[Selected] = []
    missing = []
    for name, wanted_port in entries:
        found = [Selected(d, wanted_port) for d in devices if matches(d, name)]
        if not found:
            missing.append(name)
        selected.extend(s for s in found if s not in selected)
    if missing:
        raise DiscoveryError(
            f"NCCL_IB_HCA={spec} names {', '.join(missing)}, which is not an RDMA device here "
            f"(found: {', '.join(devices)}); run playbooks/service.yml so the unit names the "
            "rail's devices, or playbooks/network.yml if a rail device is gone",
            EXIT_HCA_MISSING,
        )
    return selected


def gids_of(sysfs: Path, selected: Selected, addresses: set[str]) -> list[Gid]:
    """Every GID of the device (and port) whose IPv4-mapped address is one of `addresses`."""
    found = []
    for port_dir in numbered(sysfs / "class/infiniband" / selected.device / "ports"):
        if selected.port is not None and int(port_dir.name) != selected.port:
            continue
        for gid_file in numbered(port_dir / "gids"):
            gid = read(gid_file)
            address = gid_ipv4(gid) if gid else None
            if address not in addresses:
                continue
            found.append(
                Gid(
                    address=str(address),
                    device=selected.device,
                    port=int(port_dir.name),
                    index=int(gid_file.name),
                    kind=read(port_dir / "gid_attrs/types" / gid_file.name),
                )
            )
    return found


def discover(sysfs: Path, addresses: list[str], hca: str) -> tuple[int, list[Gid]] | None:
    """(index, the RoCE v2 GIDs behind it); None where there is no RDMA device at all."""
    devices = rdma_devices(sysfs)
    if not devices:
        return None
    selected = select_devices(hca, devices)
    candidates = [gid for s in selected for gid in gids_of(sysfs, s, set(addresses))]
    roce_v2 = [gid for gid in candidates if gid.kind == ROCE_V2]
    looked_at = ", ".join(
        s.device + (f" port {s.port}" if s.port is not None else "") for s in selected
    )
    missing = [a for a in addresses if not any(gid.address == a for gid in roce_v2)]
    if missing:
        others = [
            f"{gid.address} as {gid.kind or 'an unknown type'} at {gid.where()}"
            for gid in candidates
            if gid.address in missing
        ]
        raise DiscoveryError(
            f"no RoCE v2 GID carries {', '.join(missing)} on {looked_at} "
            f"(read {sysfs}/class/infiniband/<device>/ports/*/gids/* and gid_attrs/types/*)"
            + (f"; found only {'; '.join(others)}" if others else "")
            + f": {FIX}",
            EXIT_NO_GID,
        )
    indexes = sorted({gid.index for gid in roce_v2})
    if len(indexes) > 1:
        where = "; ".join(f"{gid.address} at {gid.where()}" for gid in roce_v2)
        raise DiscoveryError(
            f"the rail's RoCE v2 GIDs sit at different indexes ({where}), but NCCL takes one "
            f"{KEY} for every HCA: the GID tables of the twins were rebuilt differently; restart "
            "the pair after the links settle, or, if it persists, reload the rail "
            "(playbooks/network.yml) so both tables are rebuilt the same way",
            EXIT_DISAGREE,
        )
    return indexes[0], roce_v2


def write_env(out: Path, lines: list[str]) -> None:
    """Replace `out` atomically (temporary file in the same directory, then rename), mode 0644."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write("".join(line + "\n" for line in lines))
            handle.flush()
            os.fchmod(handle.fileno(), 0o644)
            os.fsync(handle.fileno())
        Path(temporary).replace(out)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an IPv4 address (give the rail address, no prefix length)"
        ) from None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rail_gid_env.py",
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
    )
    parser.add_argument(
        "--address",
        action="append",
        required=True,
        type=ipv4,
        help="this node's rail IPv4 address; once per twin",
    )
    parser.add_argument(
        "--hca", default="", help="RDMA devices as in NCCL_IB_HCA (empty: every device)"
    )
    parser.add_argument("--out", required=True, type=Path, help="env file to write")
    parser.add_argument("--sysfs-root", default=Path("/sys"), type=Path, help="root of sysfs")
    return parser.parse_args(argv)


def fail(out: Path, message: str, code: int) -> int:
    try:
        out.unlink(missing_ok=True)
        gone = f"{out} removed"
    except OSError as error:
        gone = f"{out} could not be removed either: {error}"
    print(f"rail_gid_env: {message} ({gone})", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    addresses = list(dict.fromkeys(args.address))
    out: Path = args.out
    try:
        found = discover(args.sysfs_root, addresses, args.hca)
    except DiscoveryError as error:
        return fail(out, str(error), error.code)
    if found is None:
        named = f" although NCCL_IB_HCA names {args.hca}" if args.hca.strip() else ""
        summary = (
            f"no RDMA device found under {args.sysfs_root}/class/infiniband{named}: "
            f"{KEY} is left to NCCL"
        )
        lines = [f"# {summary} (rail_gid_env.py at unit start)"]
    else:
        index, gids = found
        summary = f"{KEY}={index}: the RoCE v2 GID of " + ", ".join(
            f"{gid.address} on {gid.device} port {gid.port}" for gid in gids
        )
        lines = [f"# {summary} (rail_gid_env.py at unit start)", f"{KEY}={index}"]
    try:
        write_env(out, lines)
    except OSError as error:
        return fail(out, f"cannot write {out}: {error}", EXIT_WRITE)
    print(f"rail_gid_env: {summary}; wrote {out}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
