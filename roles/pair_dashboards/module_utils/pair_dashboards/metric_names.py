"""The metric names the dashboards may query, by the exporter that serves them.

A panel naming anything else would stay empty on every pair, so the role refuses it
(dashboard.check) and the tests hold each list to its source: vLLM's to the stand-in's
families, which are held to the pinned vLLM's own declarations.
"""

from __future__ import annotations

from typing import Final

# vLLM 0.34.0's API server (vllm/v1/metrics/loggers.py), as scraped: counters with _total,
# histograms with _bucket, _count and _sum. Labels: model_name, engine (request_success also
# finished_reason).
VLLM: Final = frozenset(
    {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        *(
            f"vllm:{histogram}{suffix}"
            for histogram in (
                "time_to_first_token_seconds",
                "inter_token_latency_seconds",
                "e2e_request_latency_seconds",
                "request_prompt_tokens",
                "request_generation_tokens",
            )
            for suffix in ("_bucket", "_count", "_sum")
        ),
    }
)

# The Spark exporter (job "spark"), on every node of a pair.
SPARK: Final = frozenset(
    {
        "spark_gpu_up",
        "spark_gpu_power_watts",
        "spark_gpu_temperature_celsius",
        "spark_gpu_clock_sm_mhz",
        "spark_gpu_clock_sm_max_mhz",
        "spark_gpu_throttle_active",
        "spark_rail_link_up",
        "spark_rail_port_active",
        "spark_rail_mtu_bytes",
        "spark_rail_transmit_bytes_total",
        "spark_rail_receive_bytes_total",
        "spark_nccl_transport",
        "spark_overlay_calls_total",
        "spark_overlay_release_info",
        "spark_overlay_release_switched_timestamp_seconds",
        "spark_memory_floor_bytes",
        "spark_memory_available_bytes",
        "spark_swap_used_bytes",
    }
)

# node_exporter's meminfo collector (job "node"): /proc/meminfo's fields as
# node_memory_<field>_bytes.
NODE: Final = frozenset(
    {
        "node_memory_MemAvailable_bytes",
        "node_memory_MemTotal_bytes",
        "node_memory_SwapTotal_bytes",
        "node_memory_SwapFree_bytes",
    }
)

KNOWN: Final = VLLM | SPARK | NODE
