"""The per-GPU calibration table: for M above the small threshold, which path is faster.

Format and meaning: the package README, "Calibration table". ``n``, ``k`` are a layer's logical
(unpadded, per-GPU) sizes; a listed shape decides every M above the small threshold. Format 2
names the M ranges where unpack + cuBLAS wins and the key the table was measured for; format 1
(one threshold per shape, no key) is still read.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from vllm_dualpath.table_key import TableKey, kernels_digest, key_mismatches, read_driver

logger = logging.getLogger("vllm.dualpath")

FORMAT_VERSION: Final = 2
FORMATS: Final = (1, 2)

Path_ = Literal["marlin", "unpack"]
MARLIN: Final[Path_] = "marlin"
UNPACK: Final[Path_] = "unpack"

# (first M, last M or None for every larger M), sorted and disjoint.
Ranges = tuple[tuple[int, int | None], ...]


class CalibrationError(ValueError):
    """The calibration table is unreadable or malformed."""


def in_ranges(ranges: Ranges, m: int) -> bool:
    return any(low <= m and (high is None or m <= high) for low, high in ranges)


@dataclass(frozen=True)
class CalibrationTable:
    unpack_ranges: dict[tuple[int, int], Ranges] = field(default_factory=dict)
    default_unpack_from_m: int | None = None
    gpu: str = ""
    key: TableKey | None = None
    measured_up_to_m: int | None = None

    def measured(self, n: int, k: int) -> bool:
        """Whether this shape was measured (and so decides every M above the small threshold)."""
        return (n, k) in self.unpack_ranges

    def lookup(self, n: int, k: int, m: int) -> Path_:
        """Faster path for an (n, k) layer at M tokens, as measured; Marlin when unknown."""
        ranges = self.unpack_ranges.get((n, k))
        if ranges is not None:
            return UNPACK if in_ranges(ranges, m) else MARLIN
        threshold = self.default_unpack_from_m
        return UNPACK if threshold is not None and m >= threshold else MARLIN


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CalibrationError(f"{where} must be a positive integer, got {value!r}")
    return value


def _parse_ranges(value: Any, where: str) -> Ranges:
    if not isinstance(value, list):
        raise CalibrationError(f"{where} must be a list of [first M, last M or null]")
    ranges: list[tuple[int, int | None]] = []
    for index, item in enumerate(value):
        spot = f"{where}[{index}]"
        if not isinstance(item, list) or len(item) != 2:
            raise CalibrationError(f"{spot} must be [first M, last M or null]")
        low = _positive_int(item[0], f"{spot}[0]")
        high = None if item[1] is None else _positive_int(item[1], f"{spot}[1]")
        previous_high = ranges[-1][1] if ranges else 0
        if high is not None and high < low:
            raise CalibrationError(f"{spot} ends before it starts")
        if previous_high is None or low <= previous_high:
            raise CalibrationError(f"{spot} overlaps or precedes the range before it")
        ranges.append((low, high))
    return tuple(ranges)


def _parse_key(value: Any, source: str) -> TableKey:
    where = f"{source}: key"
    if not isinstance(value, dict) or set(value) != {"gpu", "driver", "kernels", "shapes"}:
        raise CalibrationError(f"{where} must have exactly gpu, driver, kernels, shapes")
    for name in ("gpu", "driver", "kernels"):
        if not isinstance(value[name], str):
            raise CalibrationError(f"{where}.{name} must be a string")
    shapes = value["shapes"]
    if not isinstance(shapes, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in shapes
    ):
        raise CalibrationError(f"{where}.shapes must be a list of [n, k]")
    pairs = tuple(
        (_positive_int(n, f"{where}.shapes n"), _positive_int(k, f"{where}.shapes k"))
        for n, k in shapes
    )
    return TableKey(value["gpu"], value["driver"], value["kernels"], pairs)


_KEYS = {
    1: ({"format", "default_unpack_from_m", "shapes"}, {"gpu"}, "unpack_from_m"),
    2: ({"format", "key", "measured_up_to_m", "default_unpack_from_m", "shapes"}, set(), "unpack"),
}


def parse(document: Any, source: str = "calibration table") -> CalibrationTable:
    """Validate a decoded JSON document and build the table."""
    if not isinstance(document, dict):
        raise CalibrationError(f"{source}: top level must be an object")
    version = document.get("format")
    if version not in FORMATS:
        raise CalibrationError(f"{source}: format must be one of {list(FORMATS)}, got {version!r}")
    required, optional, entry_field = _KEYS[version]
    unknown = set(document) - required - optional
    if unknown:
        raise CalibrationError(f"{source}: unknown keys {sorted(unknown)}")
    default = document.get("default_unpack_from_m")
    if default is not None:
        default = _positive_int(default, f"{source}: default_unpack_from_m")
    shapes = document.get("shapes", [])
    if not isinstance(shapes, list):
        raise CalibrationError(f"{source}: shapes must be a list")
    table: dict[tuple[int, int], Ranges] = {}
    for index, entry in enumerate(shapes):
        where = f"{source}: shapes[{index}]"
        if not isinstance(entry, dict) or set(entry) != {"n", "k", entry_field}:
            raise CalibrationError(f"{where} must have exactly the keys n, k, {entry_field}")
        key = (_positive_int(entry["n"], f"{where}.n"), _positive_int(entry["k"], f"{where}.k"))
        if key in table:
            raise CalibrationError(f"{where}: shape n={key[0]} k={key[1]} is listed twice")
        if version == 1:
            table[key] = ((_positive_int(entry[entry_field], f"{where}.{entry_field}"), None),)
        else:
            table[key] = _parse_ranges(entry[entry_field], f"{where}.{entry_field}")
    if version == 1:
        gpu = document.get("gpu", "")
        if not isinstance(gpu, str):
            raise CalibrationError(f"{source}: gpu must be a string")
        return CalibrationTable(unpack_ranges=table, default_unpack_from_m=default, gpu=gpu)
    key = _parse_key(document.get("key"), source)
    up_to = _positive_int(document.get("measured_up_to_m"), f"{source}: measured_up_to_m")
    return CalibrationTable(table, default, key.gpu, key, up_to)


def load(path: Path) -> CalibrationTable:
    """Read and validate a table file; errors name the file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise CalibrationError(f"{path}: {error}") from error
    return parse(document, str(path))


def dump(table: CalibrationTable) -> str:
    """The table as JSON in format 2 (``load`` reads it); a table needs its key for that."""
    if table.key is None or table.measured_up_to_m is None:
        raise CalibrationError("a table is written with its key and the largest M measured")
    return json.dumps(
        {
            "format": FORMAT_VERSION,
            "key": table.key.as_json(),
            "measured_up_to_m": table.measured_up_to_m,
            "default_unpack_from_m": table.default_unpack_from_m,
            "shapes": [
                {"n": n, "k": k, "unpack": [[low, high] for low, high in ranges]}
                for (n, k), ranges in sorted(table.unpack_ranges.items())
            ],
        },
        indent=2,
    )


def load_for_service(path: Path, strict: bool) -> CalibrationTable | None:
    """The table the service was given, or None (the thresholds apply) when it is missing,
    malformed, or measured for another driver or other kernels: a stale table is never used.
    Strict mode makes a missing or malformed table an error. Needs no CUDA; the GPU model is
    checked at the first call (``foreign_gpu``)."""
    try:
        table = load(path)
    except CalibrationError as error:
        if strict:
            raise
        logger.warning("vllm-dualpath: calibration table not used (%s); thresholds apply", error)
        return None
    if table.key is None:
        return table
    here = TableKey(gpu="", driver=read_driver(), kernels=kernels_digest(), shapes=())
    problems = key_mismatches(table.key, here)
    if problems:
        logger.warning(
            "vllm-dualpath: calibration table %s was measured for another %s; thresholds apply",
            path,
            "; ".join(problems),
        )
        return None
    return table


def foreign_gpu(table: CalibrationTable, gpu: str) -> bool:
    """Whether the table was measured on another GPU model (logged once by the caller)."""
    return bool(table.gpu) and table.gpu != gpu
