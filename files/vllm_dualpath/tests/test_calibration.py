"""The per-GPU calibration table: format, validation and lookup."""

from __future__ import annotations

import json

import pytest

from vllm_dualpath import calibration

DOCUMENT = {
    "format": 1,
    "gpu": "NVIDIA GB10",
    "default_unpack_from_m": None,
    "shapes": [
        {"n": 4096, "k": 4096, "unpack_from_m": 192},
        {"n": 1024, "k": 4096, "unpack_from_m": 512},
    ],
}


def test_lookup_switches_at_the_measured_m_and_defaults_to_marlin():
    table = calibration.parse(DOCUMENT)
    assert table.lookup(4096, 4096, 191) == "marlin"
    assert table.lookup(4096, 4096, 192) == "unpack"
    assert table.lookup(1024, 4096, 300) == "marlin"
    assert table.lookup(1024, 4096, 600) == "unpack"
    assert table.lookup(4096, 1024, 900) == "marlin"  # not measured


def test_default_entry_covers_unlisted_shapes():
    table = calibration.parse({**DOCUMENT, "default_unpack_from_m": 300})
    assert table.lookup(77, 77, 299) == "marlin"
    assert table.lookup(77, 77, 300) == "unpack"
    assert table.lookup(4096, 4096, 200) == "unpack"


def test_dump_and_load_round_trip(tmp_path):
    table = calibration.parse(DOCUMENT)
    path = tmp_path / "table.json"
    path.write_text(calibration.dump(table))
    assert calibration.load(path) == table


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 2}, "format must be 1"),
        ({"extra": 1}, "unknown keys"),
        ({"shapes": {}}, "shapes must be a list"),
        ({"shapes": [{"n": 1, "k": 2}]}, r"shapes\[0\] must have exactly"),
        ({"shapes": [{"n": 0, "k": 2, "unpack_from_m": 3}]}, r"shapes\[0\]\.n must be"),
        ({"shapes": [{"n": 1, "k": 2, "unpack_from_m": True}]}, "unpack_from_m must be"),
        ({"default_unpack_from_m": -4}, "default_unpack_from_m must be"),
        ({"shapes": [DOCUMENT["shapes"][0]] * 2}, "listed twice"),
    ],
)
def test_malformed_tables_are_rejected(change, message):
    with pytest.raises(calibration.CalibrationError, match=message):
        calibration.parse({**DOCUMENT, **change})


def test_unreadable_file_error_names_the_file(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(calibration.CalibrationError, match=r"broken\.json"):
        calibration.load(path)
    assert json.loads(calibration.dump(calibration.parse(DOCUMENT)))["format"] == 1
