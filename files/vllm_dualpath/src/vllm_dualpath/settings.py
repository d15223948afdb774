"""Settings read from the environment (the service's env file carries them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENABLED = "DUALPATH_ENABLED"
SMALL_M_MAX = "DUALPATH_SMALL_M_MAX"
LARGE_M_MIN = "DUALPATH_LARGE_M_MIN"
CALIBRATION_TABLE = "DUALPATH_CALIBRATION_TABLE"
STRICT = "DUALPATH_STRICT"
CHANNEL_SCALE = "DUALPATH_CHANNEL_SCALE"
UNPACK_AHEAD = "DUALPATH_UNPACK_AHEAD"
UNPACK_AHEAD_MIN_M = "DUALPATH_UNPACK_AHEAD_MIN_M"
UNPACK_AHEAD_DEPTH = "DUALPATH_UNPACK_AHEAD_DEPTH"
STATS_DIR = "DUALPATH_STATS_DIR"
REPORT_INTERVAL_S = "DUALPATH_REPORT_INTERVAL_S"

DEFAULT_SMALL_M_MAX = 20
DEFAULT_LARGE_M_MIN = 1024
# From here ahead pays in a TP2 decoder step (docs/perf/decoder-step-h200.md); with nothing
# between the dense layers, its host time per call can outweigh it.
DEFAULT_UNPACK_AHEAD_MIN_M = 1024
# Deeper, the extra unpacks run against the next GEMM, not in the work between layers
# (docs/perf/ahead-depth-h200.md).
DEFAULT_UNPACK_AHEAD_DEPTH = 1
MAX_UNPACK_AHEAD_DEPTH = 3
# How often each process logs its per-path call counts (when they changed); 0: never.
DEFAULT_REPORT_INTERVAL_S = 60

CHANNEL_SCALE_EPILOGUE = "epilogue"
CHANNEL_SCALE_UNPACK = "unpack"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class SettingsError(ValueError):
    """An environment variable holds a value the overlay cannot use."""


@dataclass(frozen=True)
class Settings:
    enabled: bool = True
    small_m_max: int = DEFAULT_SMALL_M_MAX
    large_m_min: int = DEFAULT_LARGE_M_MIN
    calibration_table: Path | None = None
    strict: bool = False
    channel_scale: str = CHANNEL_SCALE_EPILOGUE
    unpack_ahead: bool = True
    unpack_ahead_min_m: int = DEFAULT_UNPACK_AHEAD_MIN_M
    unpack_ahead_depth: int = DEFAULT_UNPACK_AHEAD_DEPTH
    stats_dir: Path | None = None
    report_interval_s: int = DEFAULT_REPORT_INTERVAL_S


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}={raw!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def _count(env: Mapping[str, str], name: str, default: int, unit: str = "tokens") -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a whole number of {unit}") from None
    if value < 0:
        raise SettingsError(f"{name}={raw!r} must not be negative")
    return value


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise SettingsError(f"{name}={raw!r} must be one of {', '.join(choices)}")
    return value


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """DUALPATH_ENABLED alone: when it is off, no other setting is read, so none can stop vLLM."""
    return _flag(os.environ if env is None else env, ENABLED, True)


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every setting; raise SettingsError naming the first bad variable."""
    env = os.environ if env is None else env
    small = _count(env, SMALL_M_MAX, DEFAULT_SMALL_M_MAX)
    large = _count(env, LARGE_M_MIN, DEFAULT_LARGE_M_MIN)
    if large <= small:
        raise SettingsError(f"{LARGE_M_MIN}={large} must be greater than {SMALL_M_MAX}={small}")
    depth = _count(env, UNPACK_AHEAD_DEPTH, DEFAULT_UNPACK_AHEAD_DEPTH, "layers")
    if not 1 <= depth <= MAX_UNPACK_AHEAD_DEPTH:
        raise SettingsError(
            f"{UNPACK_AHEAD_DEPTH}={depth} must be between 1 and {MAX_UNPACK_AHEAD_DEPTH} layers"
        )
    table_raw = env.get(CALIBRATION_TABLE, "").strip()
    table = Path(table_raw) if table_raw else None
    # Every vLLM process reads it, each from a working directory of its own.
    if table is not None and not table.is_absolute():
        raise SettingsError(f"{CALIBRATION_TABLE}={table_raw!r} must be an absolute path")
    stats_raw = env.get(STATS_DIR, "").strip()
    stats_dir = Path(stats_raw) if stats_raw else None
    # Every vLLM process writes there, each from a working directory of its own.
    if stats_dir is not None and not stats_dir.is_absolute():
        raise SettingsError(f"{STATS_DIR}={stats_raw!r} must be an absolute path")
    return Settings(
        enabled=_flag(env, ENABLED, True),
        small_m_max=small,
        large_m_min=large,
        calibration_table=table,
        strict=_flag(env, STRICT, False),
        channel_scale=_choice(
            env,
            CHANNEL_SCALE,
            CHANNEL_SCALE_EPILOGUE,
            (CHANNEL_SCALE_EPILOGUE, CHANNEL_SCALE_UNPACK),
        ),
        unpack_ahead=_flag(env, UNPACK_AHEAD, True),
        unpack_ahead_min_m=_count(env, UNPACK_AHEAD_MIN_M, DEFAULT_UNPACK_AHEAD_MIN_M),
        unpack_ahead_depth=depth,
        stats_dir=stats_dir,
        report_interval_s=_count(env, REPORT_INTERVAL_S, DEFAULT_REPORT_INTERVAL_S, "seconds"),
    )
