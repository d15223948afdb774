"""The per-GPU calibration table: for M between the two thresholds, which path is faster.

Format and meaning: the package README, "Calibration table". ``n``, ``k`` are a layer's logical
(unpadded, per-GPU) sizes; a listed shape decides every M above the small threshold.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

FORMAT_VERSION: Final = 1

Path_ = Literal["marlin", "unpack"]
MARLIN: Final[Path_] = "marlin"
UNPACK: Final[Path_] = "unpack"


class CalibrationError(ValueError):
    """The calibration table is unreadable or malformed."""


@dataclass(frozen=True)
class CalibrationTable:
    unpack_from_m: dict[tuple[int, int], int] = field(default_factory=dict)
    default_unpack_from_m: int | None = None
    gpu: str = ""

    def measured(self, n: int, k: int) -> bool:
        """Whether this shape was measured (and so decides every M above the small threshold)."""
        return (n, k) in self.unpack_from_m

    def lookup(self, n: int, k: int, m: int) -> Path_:
        """Faster path for an (n, k) layer at M tokens, as measured; Marlin when unknown."""
        threshold = self.unpack_from_m.get((n, k), self.default_unpack_from_m)
        if threshold is not None and m >= threshold:
            return UNPACK
        return MARLIN


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CalibrationError(f"{where} must be a positive integer, got {value!r}")
    return value


def parse(document: Any, source: str = "calibration table") -> CalibrationTable:
    """Validate a decoded JSON document and build the table."""
    if not isinstance(document, dict):
        raise CalibrationError(f"{source}: top level must be an object")
    if document.get("format") != FORMAT_VERSION:
        raise CalibrationError(
            f"{source}: format must be {FORMAT_VERSION}, got {document.get('format')!r}"
        )
    unknown = set(document) - {"format", "gpu", "default_unpack_from_m", "shapes"}
    if unknown:
        raise CalibrationError(f"{source}: unknown keys {sorted(unknown)}")
    default = document.get("default_unpack_from_m")
    if default is not None:
        default = _positive_int(default, f"{source}: default_unpack_from_m")
    shapes = document.get("shapes", [])
    if not isinstance(shapes, list):
        raise CalibrationError(f"{source}: shapes must be a list")
    table: dict[tuple[int, int], int] = {}
    for index, entry in enumerate(shapes):
        where = f"{source}: shapes[{index}]"
        if not isinstance(entry, dict) or set(entry) != {"n", "k", "unpack_from_m"}:
            raise CalibrationError(f"{where} must have exactly the keys n, k, unpack_from_m")
        key = (_positive_int(entry["n"], f"{where}.n"), _positive_int(entry["k"], f"{where}.k"))
        if key in table:
            raise CalibrationError(f"{where}: shape n={key[0]} k={key[1]} is listed twice")
        table[key] = _positive_int(entry["unpack_from_m"], f"{where}.unpack_from_m")
    gpu = document.get("gpu", "")
    if not isinstance(gpu, str):
        raise CalibrationError(f"{source}: gpu must be a string")
    return CalibrationTable(unpack_from_m=table, default_unpack_from_m=default, gpu=gpu)


def load(path: Path) -> CalibrationTable:
    """Read and validate a table file; errors name the file."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise CalibrationError(f"{path}: {error}") from error
    return parse(document, str(path))


def dump(table: CalibrationTable) -> str:
    """The table as JSON in the format ``load`` reads."""
    return json.dumps(
        {
            "format": FORMAT_VERSION,
            "gpu": table.gpu,
            "default_unpack_from_m": table.default_unpack_from_m,
            "shapes": [
                {"n": n, "k": k, "unpack_from_m": m}
                for (n, k), m in sorted(table.unpack_from_m.items())
            ],
        },
        indent=2,
    )
