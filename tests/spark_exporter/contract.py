"""The Spark exporter's published metrics, each with its labels: what the alerts, the dashboards
and the console may query. test_scrape.py checks that the exporter serves every one of them;
the rules', the dashboards' and the console's tests read their names from here."""

from __future__ import annotations

from typing import Final

CONTRACT: Final[dict[str, set[str]]] = {
    "spark_gpu_up": set(),
    "spark_gpu_power_watts": set(),
    "spark_gpu_temperature_celsius": set(),
    "spark_gpu_clock_sm_mhz": set(),
    "spark_gpu_clock_sm_max_mhz": set(),
    "spark_gpu_throttle_active": {"reason"},
    "spark_rail_link_up": {"twin"},
    "spark_rail_port_active": {"twin", "device"},
    "spark_rail_port_rate_gbps": {"twin", "device"},
    "spark_rail_mtu_bytes": {"twin"},
    "spark_rail_expected_mtu_bytes": {"twin"},
    "spark_rail_transmit_bytes_total": {"twin"},
    "spark_rail_receive_bytes_total": {"twin"},
    "spark_rail_netdev_transmit_bytes_total": {"twin"},
    "spark_rail_netdev_receive_bytes_total": {"twin"},
    "spark_nccl_transport": {"transport"},
    "spark_overlay_calls_total": {"path"},
    "spark_overlay_release_info": {"release"},
    "spark_overlay_release_switched_timestamp_seconds": set(),
    "spark_tls_certificate_expiry_timestamp_seconds": set(),
    "spark_memory_floor_bytes": set(),
    "spark_memory_available_bytes": set(),
    "spark_swap_used_bytes": set(),
    "spark_exporter_source_up": {"source"},
}
