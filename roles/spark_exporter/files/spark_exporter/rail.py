"""The rail, twin by twin: the netdev's link state, MTU and byte counters, and its RDMA device's
port state, rate and data counters, all from sysfs.

The RDMA device of a twin is the one under ``class/net/<twin>/device/infiniband/`` (else the one
whose ``device/net/`` holds the twin). Its port counters ``port_xmit_data`` and ``port_rcv_data``
count 4-byte words, so they are multiplied by 4. RoCE traffic that the NIC moves by RDMA need not
show in the netdev's counters: both are exported, so a twin that carries NCCL's traffic is seen
on the RDMA counters, and one that carries only TCP (a socket fall-back) on the netdev's alone.
"""

from __future__ import annotations

import re
from pathlib import Path

from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, read_text

NAME = "rail"
PORT = "1"
WORD_BYTES = 4
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def configured(settings: Settings) -> bool:
    return bool(settings.twins)


def rdma_device(sysfs: Path, interface: str) -> str | None:
    under_netdev = sorted(
        p.name for p in (sysfs / "class/net" / interface).glob("device/infiniband/*")
    )
    if under_netdev:
        return under_netdev[0]
    for device in sorted((sysfs / "class/infiniband").glob("*")):
        if (device / "device/net" / interface).exists():
            return device.name
    return None


def _read(path: Path, report: Report) -> str | None:
    try:
        return read_text(path)
    except OSError as error:
        report.fail("unreadable", f"{path}: {error}")
        return None


def _integer(path: Path, report: Report) -> int | None:
    text = _read(path, report)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        report.fail("unparsable", f"{path}: {text[:40]!r} is not a number")
        return None


def collect(settings: Settings, metrics: Metrics, report: Report) -> None:
    link_up = metrics.gauge("spark_rail_link_up", "1 when the twin's netdev is up (operstate).")
    mtu = metrics.gauge("spark_rail_mtu_bytes", "The twin's MTU now.")
    expected = metrics.gauge("spark_rail_expected_mtu_bytes", "The MTU the rail is set up with.")
    active = metrics.gauge("spark_rail_port_active", "1 when the twin's RDMA port is ACTIVE.")
    rate = metrics.gauge("spark_rail_port_rate_gbps", "The twin's RDMA port rate, Gb/s.")
    tx = metrics.counter(
        "spark_rail_transmit_bytes_total", "Bytes the twin's RDMA port sent (port_xmit_data x 4)."
    )
    rx = metrics.counter(
        "spark_rail_receive_bytes_total", "Bytes the twin's RDMA port received (port_rcv_data x 4)."
    )
    netdev_tx = metrics.counter(
        "spark_rail_netdev_transmit_bytes_total", "Bytes the twin's netdev sent (tx_bytes)."
    )
    netdev_rx = metrics.counter(
        "spark_rail_netdev_receive_bytes_total", "Bytes the twin's netdev received (rx_bytes)."
    )
    sysfs = settings.sysfs_root
    for twin in settings.twins:
        if settings.expected_mtu > 0:
            expected.add(settings.expected_mtu, twin=twin)
        netdev = sysfs / "class/net" / twin
        if not netdev.exists():
            link_up.add(0, twin=twin)  # a missing twin is a finding, not a read failure
            continue
        state = _read(netdev / "operstate", report)
        if state is not None:
            link_up.add(1 if state == "up" else 0, twin=twin)
        if (value := _integer(netdev / "mtu", report)) is not None:
            mtu.add(value, twin=twin)
        if (value := _integer(netdev / "statistics/tx_bytes", report)) is not None:
            netdev_tx.add(value, twin=twin)
        if (value := _integer(netdev / "statistics/rx_bytes", report)) is not None:
            netdev_rx.add(value, twin=twin)
        device = rdma_device(sysfs, twin)
        if device is None:
            continue
        port = sysfs / "class/infiniband" / device / "ports" / PORT
        if (text := _read(port / "state", report)) is not None:
            is_active = text.split(":")[-1].strip() == "ACTIVE"
            active.add(1 if is_active else 0, twin=twin, device=device)
        if (text := _read(port / "rate", report)) is not None:
            if match := _RATE.match(text):
                rate.add(float(match[1]), twin=twin, device=device)
            else:
                report.fail("unparsable", f"{port / 'rate'}: {text[:40]!r}")
        if (value := _integer(port / "counters/port_xmit_data", report)) is not None:
            tx.add(value * WORD_BYTES, twin=twin)
        if (value := _integer(port / "counters/port_rcv_data", report)) is not None:
            rx.add(value * WORD_BYTES, twin=twin)
