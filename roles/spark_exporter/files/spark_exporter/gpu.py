"""The GPU through nvidia-smi (NVIDIA does not support DCGM on the Spark): power, temperature, SM
clock against its maximum, utilisation, and which clock event (throttle) reasons are active.

The reasons come from one field, the active bitmask, decoded with NVML's bit values. Drivers
since R535 call it ``clocks_event_reasons.active``; older ones know only
``clocks_throttle_reasons.active``, and nvidia-smi refuses a field it does not know
('Field "..." is not a valid field to query.', exit status 2), so the older name is tried then,
and the name that worked is kept. A value nvidia-smi cannot give ([N/A], [Not Supported]) leaves
its sample out.
"""

from __future__ import annotations

import csv
import logging
import subprocess

from spark_exporter.exposition import Metrics
from spark_exporter.source import Report, Settings, SourceError

NAME = "gpu"
logger = logging.getLogger("spark_exporter")

REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
FIELDS = ("power.draw", "temperature.gpu", "clocks.sm", "clocks.max.sm", "utilization.gpu")
# NVML's clocks event reasons (nvmlClocksEventReason*): label -> bit.
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
INVALID_FIELD = "is not a valid field to query"

# nvidia-smi path -> the reason field its driver knows, once found.
_reason_field: dict[str, str] = {}


def configured(settings: Settings) -> bool:
    return True


def query(settings: Settings, fields: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    argv = [settings.nvidia_smi, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=settings.nvidia_smi_timeout_s,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as error:
        raise SourceError("not_found", f"{settings.nvidia_smi}: {error}") from error
    except PermissionError as error:
        raise SourceError("unreadable", f"{settings.nvidia_smi}: {error}") from error
    except subprocess.TimeoutExpired as error:
        raise SourceError(
            "timeout", f"{settings.nvidia_smi} gave no answer in {settings.nvidia_smi_timeout_s} s"
        ) from error
    except OSError as error:
        raise SourceError("failed", f"{settings.nvidia_smi}: {error}") from error


def read_row(settings: Settings) -> dict[str, str]:
    """The first GPU's fields as nvidia-smi prints them (the Spark has one GPU)."""
    known = _reason_field.get(settings.nvidia_smi)
    candidates = (known,) if known else REASON_FIELDS
    done = None
    for reason_field in candidates:
        fields = (*FIELDS, reason_field)
        done = query(settings, fields)
        if done.returncode == 0:
            _reason_field[settings.nvidia_smi] = reason_field
            break
        if INVALID_FIELD not in done.stdout + done.stderr:
            break
    assert done is not None
    output = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        first = output.splitlines()[0] if output else "no output"
        raise SourceError("failed", f"nvidia-smi exited {done.returncode}: {first}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        raise SourceError("unparsable", "nvidia-smi printed no GPU")
    (row,) = csv.reader([lines[0]], skipinitialspace=True)
    if len(row) != len(fields):
        raise SourceError("unparsable", f"nvidia-smi printed {lines[0]!r} for {len(fields)} fields")
    return dict(zip((*FIELDS, "reasons"), (value.strip() for value in row), strict=True))


def number(text: str) -> float | None:
    """A value nvidia-smi printed, or None for [N/A], [Not Supported] and the like."""
    try:
        return float(text)
    except ValueError:
        return None


def collect(settings: Settings, metrics: Metrics, report: Report) -> None:
    up = metrics.gauge("spark_gpu_up", "1 when nvidia-smi answered for the GPU, else 0.")
    try:
        row = read_row(settings)
    except SourceError:
        up.add(0)
        raise
    up.add(1)
    gauges = (
        ("power.draw", "spark_gpu_power_watts", "GPU power draw (nvidia-smi power.draw).", 1.0),
        ("temperature.gpu", "spark_gpu_temperature_celsius", "GPU core temperature.", 1.0),
        ("clocks.sm", "spark_gpu_clock_sm_mhz", "Current SM clock (nvidia-smi clocks.sm).", 1.0),
        ("clocks.max.sm", "spark_gpu_clock_sm_max_mhz", "Maximum SM clock (clocks.max.sm).", 1.0),
        ("utilization.gpu", "spark_gpu_utilization_ratio", "GPU busy time, 0 to 1.", 0.01),
    )
    for field_name, metric, help_text, scale in gauges:
        value = number(row[field_name])
        if value is not None:
            metrics.gauge(metric, help_text).add(value * scale)
    reasons = row["reasons"]
    try:
        mask = int(reasons, 16)
    except ValueError:
        if number(reasons) is None and reasons.startswith("["):
            return  # nvidia-smi cannot tell on this GPU
        report.fail("unparsable", f"clock event reasons {reasons!r} are not a bitmask")
        return
    throttle = metrics.gauge(
        "spark_gpu_throttle_active",
        "1 while this clock event (throttle) reason holds the GPU's clocks down, else 0.",
    )
    for reason, bit in REASON_BITS.items():
        throttle.add(1 if mask & bit else 0, reason=reason)
