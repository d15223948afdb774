"""Which transport NCCL chose, read from its NCCL_DEBUG=INFO log.

NCCL names the network plugin it loaded ("Using network IB" / "Using network Socket") and the
transport of every channel ("via NET/IB/0", "via NET/Socket/1"). A pair that should talk RDMA but
logs NET/Socket has silently fallen back to TCP: that is the finding the rail exists to prevent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

_NETWORK = re.compile(r"NCCL INFO Using network (?P<name>\w+)")
_CHANNEL_VIA = re.compile(
    r"NCCL INFO Channel \S+ : .* via (?P<via>NET/(?P<net>\w+)\S*|P2P\S*|SHM\S*)"
)
_IB_DEVICES = re.compile(r"NCCL INFO NET/IB : Using (?P<devices>.+?)(?: \[RO\])?; OOB (?P<oob>\S+)")
_IB_NONE = re.compile(r"NCCL INFO NET/IB : No device found")
_SOCKET_IFACES = re.compile(r"NCCL INFO NET/Socket : Using (?P<ifaces>.+)")
_VERSION = re.compile(r"NCCL version (?P<version>\S+)")
_GID_INDEX = re.compile(r"NCCL_IB_GID_INDEX set by environment to (?P<index>-?\d+)")
_IB_DEVICE = re.compile(r"\[\d+\](?P<name>[\w.-]+):(?P<port>\d+)/(?P<link>\w+)")
_WARN = re.compile(r"NCCL WARN (?P<text>.+)")


class Transport(StrEnum):
    """The inter-node transport NCCL used."""

    IB = "IB"
    SOCKET = "Socket"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class NcclTransportReport:
    """What an NCCL_DEBUG=INFO log says about the network path between the nodes."""

    transport: Transport
    version: str | None = None
    ib_devices: tuple[str, ...] = ()
    ib_link_layers: tuple[str, ...] = ()
    socket_interfaces: tuple[str, ...] = ()
    gid_index: int | None = None
    channel_transports: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)
    evidence: tuple[str, ...] = field(default_factory=tuple)

    @property
    def uses_rdma(self) -> bool:
        return self.transport is Transport.IB


def parse_nccl_log(lines: Iterable[str]) -> NcclTransportReport:
    """Read NCCL's INFO lines (any prefix before 'NCCL' is ignored) and name the transport."""
    networks: list[str] = []
    channels: list[str] = []
    ib_devices: list[str] = []
    ib_links: list[str] = []
    socket_ifaces: list[str] = []
    warnings: list[str] = []
    evidence: list[str] = []
    version: str | None = None
    gid_index: int | None = None
    ib_absent = False

    for raw in lines:
        line = raw.rstrip("\n")
        if match := _VERSION.search(line):
            version = version or match["version"]
        if match := _NETWORK.search(line):
            networks.append(match["name"])
            evidence.append(line.strip())
        if match := _CHANNEL_VIA.search(line):
            net = match["net"]
            if net:
                channels.append(net)
                if len([c for c in channels if c == net]) == 1:
                    evidence.append(line.strip())
        if match := _IB_DEVICES.search(line):
            for device in _IB_DEVICE.finditer(match["devices"]):
                if device["name"] not in ib_devices:
                    ib_devices.append(device["name"])
                    ib_links.append(device["link"])
            evidence.append(line.strip())
        if _IB_NONE.search(line):
            ib_absent = True
            evidence.append(line.strip())
        if match := _SOCKET_IFACES.search(line):
            for iface in re.findall(r"\[\d+\]([\w.-]+):", match["ifaces"]):
                if iface not in socket_ifaces:
                    socket_ifaces.append(iface)
        if match := _GID_INDEX.search(line):
            gid_index = int(match["index"])
        if match := _WARN.search(line):
            warnings.append(match["text"].strip())

    return NcclTransportReport(
        transport=_decide(networks, channels, ib_absent),
        version=version,
        ib_devices=tuple(ib_devices),
        ib_link_layers=tuple(ib_links),
        socket_interfaces=tuple(socket_ifaces),
        gid_index=gid_index,
        channel_transports=tuple(sorted(set(channels))),
        warnings=tuple(warnings),
        evidence=tuple(evidence),
    )


def _decide(networks: list[str], channels: list[str], ib_absent: bool) -> Transport:
    # Any socket channel means some traffic goes over TCP: that is a fallback even if IB loaded.
    if "Socket" in channels or (not channels and "Socket" in networks):
        return Transport.SOCKET
    if channels and set(channels) == {"IB"}:
        return Transport.IB
    if not channels and networks and set(networks) == {"IB"} and not ib_absent:
        return Transport.IB
    return Transport.UNKNOWN
