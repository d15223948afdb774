"""The exporter scraped over HTTP on a made-up Spark: every metric with its value, and each way a
source can be wrong (a twin down, MTU drift, NCCL on sockets, no nvidia-smi, unreadable counters)
named in the exposition without failing the scrape."""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from lab import nvidia_smi_standin, spark_tree
from tests.helpers import REPO
from tests.spark_exporter.conftest import Exporter, Node
from tests.spark_exporter.contract import CONTRACT

SAMPLES = REPO / "tests/pair_evidence/samples"
IB, SOCKET = (SAMPLES / "nccl_info_ib_sample.log", SAMPLES / "nccl_info_socket_fallback_sample.log")
TWIN_1, TWIN_2 = spark_tree.TWINS
Start = Callable[..., Exporter]
# The names others build alerts and dashboards on (README), with the labels each carries.


def write_calls(node: Node, name: str, calls: dict[str, int]) -> None:
    document = {"pid": 312, "host": "spark-01", "process": "EngineCore_DP0", "calls": calls}
    path = node.stats_dir / "vllm-tp2-rank0" / name
    path.write_text(json.dumps(document) + "\n", encoding="utf-8")


def test_a_healthy_spark_exports_every_metric_with_its_value(
    node: Node, start_exporter: Start, tmp_path: Path
) -> None:
    write_calls(node, "spark-01-312.json", {"marlin": 40, "unpack": 2})
    write_calls(node, "spark-01-313.json", {"marlin": 2, "unpack": 1})
    (node.stats_dir / "vllm-tp2-rank0/spark-01-314.json").write_text('{"calls": {"marl')
    (node.stats_dir / "vllm-tp2-rank0/.spark-01-315.json.1.tmp").write_text("{}")
    nccl = tmp_path / "nccl.log"
    shutil.copy(IB, nccl)
    certificate = tmp_path / "front-door.pem"
    expiry = write_certificate(certificate, "2031-05-06T07:08:09")
    switched = (node.overlay_dir / "current").lstat().st_mtime
    exporter = start_exporter(
        *node.arguments(), "--nccl-log", str(nccl), "--tls-certificate", str(certificate)
    )

    seen = exporter.scrape()

    for name, labels in CONTRACT.items():
        found = [dict(key) for sample, key in seen.samples if sample == name]
        assert found, f"{name} missing"
        assert all(set(item) == labels for item in found), (name, found)
    assert seen.content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert seen.value("spark_gpu_up") == 1
    assert seen.value("spark_gpu_power_watts") == 86.43
    assert seen.value("spark_gpu_temperature_celsius") == 71
    assert seen.value("spark_gpu_clock_sm_mhz") == 2405
    assert seen.value("spark_gpu_clock_sm_max_mhz") == 3003
    assert seen.value("spark_gpu_utilization_ratio") == pytest.approx(0.97)
    reasons = {
        dict(key)["reason"]: value
        for (name, key), value in seen.samples.items()
        if name == "spark_gpu_throttle_active"
    }
    assert reasons == {
        "sw_power_cap": 1,
        "hw_slowdown": 0,
        "hw_thermal_slowdown": 0,
        "hw_power_brake_slowdown": 0,
        "sw_thermal_slowdown": 0,
        "sync_boost": 0,
        "gpu_idle": 0,
        "applications_clocks_setting": 0,
    }
    for number, twin in enumerate(spark_tree.TWINS):
        name = twin.interface
        assert seen.value("spark_rail_link_up", twin=name) == 1
        assert seen.value("spark_rail_port_active", twin=name, device=twin.device) == 1
        assert seen.value("spark_rail_port_rate_gbps", twin=name, device=twin.device) == 200
        assert seen.value("spark_rail_mtu_bytes", twin=name) == 9000
        assert seen.value("spark_rail_expected_mtu_bytes", twin=name) == 9000
        assert seen.value("spark_rail_transmit_bytes_total", twin=name) == 4 * (
            250_000_000 + number
        )
        assert seen.value("spark_rail_receive_bytes_total", twin=name) == 4 * (125_000_000 + number)
        assert seen.value("spark_rail_netdev_transmit_bytes_total", twin=name) == 1_000_000 + number
        assert seen.value("spark_rail_netdev_receive_bytes_total", twin=name) == 2_000_000 + number
    assert seen.types["spark_rail_transmit_bytes_total"] == "counter"
    assert [
        seen.value("spark_nccl_transport", transport=t) for t in ("ib", "socket", "unknown")
    ] == [1, 0, 0]
    assert seen.value("spark_nccl_version_info", version="2.27.7+cuda13.0") == 1
    assert seen.value("spark_overlay_calls_total", path="marlin") == 42
    assert seen.value("spark_overlay_calls_total", path="unpack") == 3
    assert seen.value("spark_overlay_processes") == 2, "the partial file is skipped"
    assert seen.value("spark_overlay_release_info", release="0.1.0-9eb9a229b23d") == 1
    assert seen.value("spark_overlay_release_switched_timestamp_seconds") == switched
    assert seen.value("spark_tls_certificate_expiry_timestamp_seconds") == expiry
    assert seen.value("spark_memory_floor_bytes") == 5 << 30
    assert seen.value("spark_memory_available_bytes") == 100 << 30
    assert seen.value("spark_memory_total_bytes") == 127535000 * 1024
    assert seen.value("spark_swap_used_bytes") == 4 << 30
    sources = {"memory", "gpu", "rail", "nccl", "overlay_calls", "overlay_release", "tls"}
    for source in sources:
        assert seen.value("spark_exporter_source_up", source=source) == 1, source
    assert not [n for n, _ in seen.samples if n == "spark_exporter_source_error_info"]
    assert "warning" not in exporter.log.read_text(encoding="utf-8").lower()


def write_certificate(path: Path, not_after: str) -> float:
    """A self-signed certificate valid until `not_after` (UTC); its expiry as Unix time."""
    from datetime import UTC, datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import Encoding
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "front-door.example.internal")])
    expiry = datetime.fromisoformat(not_after).replace(tzinfo=UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime(1990, 1, 1, tzinfo=UTC))
        .not_valid_after(expiry)
        .sign(key, hashes.SHA256())
    )
    path.write_bytes(certificate.public_bytes(Encoding.PEM))
    return expiry.timestamp()


def test_one_twin_down_shows_on_that_twin_only(node: Node, start_exporter: Start) -> None:
    twin = node.sysfs / "class/net" / TWIN_2.interface
    (twin / "operstate").write_text("down\n")
    (node.sysfs / "class/infiniband" / TWIN_2.device / "ports/1/state").write_text("1: DOWN\n")

    seen = start_exporter(*node.arguments()).scrape()

    assert seen.value("spark_rail_link_up", twin=TWIN_1.interface) == 1
    assert seen.value("spark_rail_link_up", twin=TWIN_2.interface) == 0
    assert seen.value("spark_rail_port_active", twin=TWIN_1.interface, device=TWIN_1.device) == 1
    assert seen.value("spark_rail_port_active", twin=TWIN_2.interface, device=TWIN_2.device) == 0
    assert seen.value("spark_exporter_source_up", source="rail") == 1, "read in full: it is down"


def test_a_missing_twin_is_down_and_named(node: Node, start_exporter: Start) -> None:
    (node.sysfs / "class/net" / TWIN_2.interface).unlink()

    seen = start_exporter(*node.arguments()).scrape()

    assert seen.value("spark_rail_link_up", twin=TWIN_2.interface) == 0
    assert not seen.has("spark_rail_mtu_bytes", twin=TWIN_2.interface)
    assert seen.value("spark_rail_expected_mtu_bytes", twin=TWIN_2.interface) == 9000


def test_mtu_drift_after_a_firmware_update_shows_against_the_expected_mtu(
    node: Node, start_exporter: Start
) -> None:
    (node.sysfs / "class/net" / TWIN_1.interface / "mtu").write_text("1500\n")

    seen = start_exporter(*node.arguments()).scrape()

    assert seen.value("spark_rail_mtu_bytes", twin=TWIN_1.interface) == 1500
    assert seen.value("spark_rail_expected_mtu_bytes", twin=TWIN_1.interface) == 9000
    assert seen.value("spark_rail_mtu_bytes", twin=TWIN_2.interface) == 9000


def test_the_rdma_device_is_found_from_the_infiniband_class_too(
    node: Node, start_exporter: Start
) -> None:
    # No infiniband/ under the netdev's PCI function: the RDMA device's device/net/ names the twin.
    function = (node.sysfs / "class/net" / TWIN_1.interface / "device").resolve()
    (function / "infiniband").rename(function / "rdma")
    device = node.sysfs / "class/infiniband" / TWIN_1.device
    device.unlink()
    device.symlink_to(f"../../devices/{TWIN_1.pci}/rdma/{TWIN_1.device}")
    assert (device / "device/net" / TWIN_1.interface).is_dir()

    seen = start_exporter(*node.arguments()).scrape()

    assert seen.value("spark_rail_port_active", twin=TWIN_1.interface, device=TWIN_1.device) == 1


def test_nccl_on_sockets_is_the_transport_seen_last(
    node: Node, start_exporter: Start, tmp_path: Path
) -> None:
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    # A directory of NCCL_DEBUG_FILE's per-process files: the newest one speaks.
    shutil.copy(IB, nccl / "spark-01.311.log")
    os.utime(nccl / "spark-01.311.log", (time.time() - 60, time.time() - 60))
    shutil.copy(SOCKET, nccl / "spark-01.312.log")
    exporter = start_exporter(*node.arguments(), "--nccl-log", str(nccl))

    seen = exporter.scrape()

    assert seen.value("spark_nccl_transport", transport="socket") == 1
    assert seen.value("spark_nccl_transport", transport="ib") == 0
    assert seen.value("spark_nccl_transport", transport="unknown") == 0
    # The same log, appended to by a restart that came up on IB: the last line wins.
    with (nccl / "spark-01.312.log").open("a", encoding="utf-8") as log:
        log.write(IB.read_text(encoding="utf-8"))
    assert exporter.scrape().value("spark_nccl_transport", transport="ib") == 1


def test_no_nccl_log_yet_is_unknown_and_says_why(
    node: Node, start_exporter: Start, tmp_path: Path
) -> None:
    seen = start_exporter(*node.arguments(), "--nccl-log", str(tmp_path / "absent.log")).scrape()

    assert seen.value("spark_nccl_transport", transport="unknown") == 1
    assert seen.value("spark_exporter_source_up", source="nccl") == 0
    assert seen.value("spark_exporter_source_error_info", source="nccl", reason="not_found") == 1


def test_without_nvidia_smi_the_gpu_is_down_and_the_rest_answers(
    node: Node, start_exporter: Start, tmp_path: Path
) -> None:
    arguments = node.arguments()
    arguments[arguments.index("--nvidia-smi") + 1] = str(tmp_path / "no/nvidia-smi")
    exporter = start_exporter(*arguments)

    seen = exporter.scrape()

    assert seen.value("spark_gpu_up") == 0
    assert not seen.has("spark_gpu_power_watts")
    assert seen.value("spark_exporter_source_up", source="gpu") == 0
    assert seen.value("spark_exporter_source_error_info", source="gpu", reason="not_found") == 1
    assert seen.value("spark_rail_link_up", twin=TWIN_1.interface) == 1
    assert seen.value("spark_memory_available_bytes") == 100 << 30
    exporter.scrape()
    said = exporter.log.read_text(encoding="utf-8")
    assert said.count("source gpu: not_found") == 1, "said once, not at every scrape"


def test_a_driver_that_is_not_loaded_fails_the_gpu_source(
    node: Node, start_exporter: Start
) -> None:
    nvidia_smi_standin.set_state(node.nvidia_smi, driver="absent")

    seen = start_exporter(*node.arguments()).scrape()

    assert seen.value("spark_gpu_up") == 0
    assert seen.value("spark_exporter_source_error_info", source="gpu", reason="failed") == 1


def test_a_slow_nvidia_smi_is_cut_at_the_timeout(node: Node, start_exporter: Start) -> None:
    nvidia_smi_standin.set_state(node.nvidia_smi, delay_s=30)
    exporter = start_exporter(*node.arguments(), "--nvidia-smi-timeout", "0.5")

    started = time.monotonic()
    seen = exporter.scrape()

    assert time.monotonic() - started < 10
    assert seen.value("spark_exporter_source_error_info", source="gpu", reason="timeout") == 1
    assert seen.value("spark_memory_available_bytes") == 100 << 30


def test_values_the_gpu_cannot_report_are_left_out(node: Node, start_exporter: Start) -> None:
    values = {**nvidia_smi_standin.BUSY_GB10, "power.draw": "[N/A]"}
    del values["clocks_event_reasons.active"]
    nvidia_smi_standin.set_state(node.nvidia_smi, values)

    seen = start_exporter(*node.arguments()).scrape()

    assert seen.value("spark_gpu_up") == 1
    assert not seen.has("spark_gpu_power_watts")
    assert not [n for n, _ in seen.samples if n == "spark_gpu_throttle_active"]
    assert seen.value("spark_gpu_temperature_celsius") == 71
    assert seen.value("spark_exporter_source_up", source="gpu") == 1


def test_a_driver_before_r535_is_asked_with_the_throttle_field_names(
    node: Node, start_exporter: Start
) -> None:
    nvidia_smi_standin.set_state(node.nvidia_smi, driver="old")
    exporter = start_exporter(*node.arguments())

    first, second = exporter.scrape(), exporter.scrape()

    for seen in (first, second):
        assert seen.value("spark_gpu_throttle_active", reason="sw_power_cap") == 1
    queries = [call[0] for call in nvidia_smi_standin.calls(node.nvidia_smi)]
    assert "clocks_event_reasons.active" in queries[0]
    assert all("clocks_throttle_reasons.active" in query for query in queries[1:])
    assert len(queries) == 3, "the field name that worked is kept"


def test_unreadable_counters_leave_their_samples_out_and_the_scrape_answers(
    node: Node, start_exporter: Start
) -> None:
    counters = node.sysfs / "class/infiniband" / TWIN_1.device / "ports/1/counters"
    (counters / "port_xmit_data").unlink()
    (counters / "port_xmit_data").mkdir()  # read() fails, as on a counter the driver refuses
    (counters / "port_rcv_data").write_text("N/A\n")
    (node.sysfs / "class/net" / TWIN_2.interface / "statistics/tx_bytes").unlink()
    (node.sysfs / "class/net" / TWIN_2.interface / "statistics/tx_bytes").mkdir()

    seen = start_exporter(*node.arguments()).scrape()

    assert not seen.has("spark_rail_transmit_bytes_total", twin=TWIN_1.interface)
    assert not seen.has("spark_rail_receive_bytes_total", twin=TWIN_1.interface)
    assert not seen.has("spark_rail_netdev_transmit_bytes_total", twin=TWIN_2.interface)
    assert seen.value("spark_rail_transmit_bytes_total", twin=TWIN_2.interface) > 0
    assert seen.value("spark_rail_link_up", twin=TWIN_1.interface) == 1
    assert seen.value("spark_exporter_source_up", source="rail") == 0
    assert seen.value("spark_exporter_source_error_info", source="rail", reason="unreadable") == 1
    assert seen.value("spark_gpu_up") == 1


def test_label_values_are_escaped(node: Node, start_exporter: Start) -> None:
    odd = 'rc-"quoted"\\back\nline'
    current = node.overlay_dir / "current"
    (node.overlay_dir / "releases" / odd).mkdir()
    current.unlink()
    current.symlink_to(f"releases/{odd}")
    write_calls(node, "spark-01-1.json", {"marlin": 1, 'new"path\\': 7})

    seen = start_exporter(*node.arguments()).scrape()

    assert seen.value("spark_overlay_release_info", release=odd) == 1
    assert seen.value("spark_overlay_calls_total", path='new"path\\') == 7
    assert 'release="rc-\\"quoted\\"\\\\back\\nline"' in seen.text


def test_a_stats_dir_that_is_not_there_is_named(node: Node, start_exporter: Start) -> None:
    shutil.rmtree(node.stats_dir)
    (node.overlay_dir / "current").unlink()

    seen = start_exporter(*node.arguments()).scrape()

    for source in ("overlay_calls", "overlay_release"):
        assert seen.value("spark_exporter_source_up", source=source) == 0
        assert (
            seen.value("spark_exporter_source_error_info", source=source, reason="not_found") == 1
        )
    assert not seen.has("spark_overlay_calls_total", path="marlin")


def test_collect_names_the_sources_of_a_scrape(node: Node, start_exporter: Start) -> None:
    exporter = start_exporter(*node.arguments())

    seen = exporter.scrape("?collect[]=memory")

    assert seen.names() == {
        "spark_exporter_source_up",
        "spark_exporter_source_duration_seconds",
        "spark_memory_floor_bytes",
        "spark_memory_available_bytes",
        "spark_memory_total_bytes",
        "spark_swap_total_bytes",
        "spark_swap_used_bytes",
    }
    assert nvidia_smi_standin.calls(node.nvidia_smi) == [], "no nvidia-smi for a memory poll"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{exporter.url}/metrics?collect[]=disk", timeout=10)
    assert refused.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{exporter.url}/other", timeout=10)
    assert missing.value.code == 404


def test_each_scrape_reads_afresh(node: Node, start_exporter: Start) -> None:
    exporter = start_exporter(*node.arguments())
    assert exporter.scrape().value("spark_memory_available_bytes") == 100 << 30

    spark_tree.set_available(node.procfs, 3 * spark_tree.GIB_KIB)
    nvidia_smi_standin.set_state(
        node.nvidia_smi, {**nvidia_smi_standin.BUSY_GB10, "clocks.sm": "611"}
    )

    seen = exporter.scrape()
    assert seen.value("spark_memory_available_bytes") == 3 << 30
    assert seen.value("spark_gpu_clock_sm_mhz") == 611


def test_the_double_refuses_a_field_as_nvidia_smi_does(tmp_path: Path) -> None:
    import subprocess

    double = nvidia_smi_standin.install(tmp_path)
    done = subprocess.run(
        [str(double), "--query-gpu=power.draw,xyz", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, 'Field "xyz" is not a valid field to query.\n\n')
    nvidia_smi_standin.set_state(double, driver="old")
    done = subprocess.run(
        [str(double), "--query-gpu=clocks_event_reasons.active", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
