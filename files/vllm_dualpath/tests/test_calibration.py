"""The per-GPU calibration table: format, validation and lookup."""

from __future__ import annotations

import json
import logging

import pytest

from vllm_dualpath import calibration, table_key

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


def here_key(**change) -> table_key.TableKey:
    fields = {
        "gpu": "NVIDIA GB10",
        "driver": table_key.read_driver(),
        "kernels": table_key.kernels_digest(),
        "shapes": ((1024, 4096), (4096, 4096)),
        **change,
    }
    return table_key.TableKey(**fields)


def measured_table(**change) -> calibration.CalibrationTable:
    return calibration.CalibrationTable(
        unpack_ranges={(4096, 4096): ((64, 100), (192, None)), (1024, 4096): ()},
        gpu="NVIDIA GB10",
        key=here_key(**change),
        measured_up_to_m=8192,
    )


def test_format_2_round_trips_with_its_ranges_and_key(tmp_path):
    table = measured_table()
    path = tmp_path / "table.json"
    path.write_text(calibration.dump(table))
    loaded = calibration.load(path)
    assert loaded == table
    assert [loaded.lookup(4096, 4096, m) for m in (63, 64, 100, 101, 191, 192, 9000)] == [
        "marlin",
        "unpack",
        "unpack",
        "marlin",
        "marlin",
        "unpack",
        "unpack",
    ]
    assert loaded.lookup(1024, 4096, 5000) == "marlin"  # measured: Marlin at every M


def test_a_table_is_only_written_with_its_key():
    with pytest.raises(calibration.CalibrationError, match="with its key"):
        calibration.dump(calibration.parse(DOCUMENT))


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([[100, 50]], "ends before it starts"),
        ([[64, None], [200, 300]], "overlaps"),
        ([[64, 200], [150, 300]], "overlaps"),
        ([[0, 10]], "must be a positive integer"),
        ([64], "must be .first M"),
    ],
)
def test_overlapping_or_reversed_ranges_are_refused(ranges, message):
    document = json.loads(calibration.dump(measured_table()))
    document["shapes"][0]["unpack"] = ranges
    with pytest.raises(calibration.CalibrationError, match=message):
        calibration.parse(document)


def test_the_service_uses_a_table_measured_here(tmp_path):
    path = tmp_path / "table.json"
    path.write_text(calibration.dump(measured_table()))
    assert calibration.load_for_service(path, strict=False) == measured_table()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"kernels": "0123456789abcdef"}, "kernels '0123456789abcdef'"),
        ({"driver": "1.2.3"}, "driver"),
    ],
)
def test_a_stale_table_is_refused_with_the_reason(tmp_path, caplog, monkeypatch, change, reason):
    monkeypatch.setattr(calibration, "read_driver", lambda: "580.95.05")
    path = tmp_path / "table.json"
    path.write_text(calibration.dump(measured_table(**{"driver": "580.95.05", **change})))
    with caplog.at_level(logging.WARNING, logger="vllm.dualpath"):
        assert calibration.load_for_service(path, strict=False) is None
    assert reason in caplog.text and "thresholds apply" in caplog.text


def test_a_missing_or_malformed_table_falls_back_unless_strict(tmp_path, caplog):
    missing = tmp_path / "absent.json"
    with caplog.at_level(logging.WARNING, logger="vllm.dualpath"):
        assert calibration.load_for_service(missing, strict=False) is None
    assert "absent.json" in caplog.text
    with pytest.raises(calibration.CalibrationError, match=r"absent\.json"):
        calibration.load_for_service(missing, strict=True)


def test_a_table_from_another_gpu_model_is_foreign():
    table = measured_table()
    assert calibration.foreign_gpu(table, "NVIDIA H100 80GB HBM3")
    assert not calibration.foreign_gpu(table, "NVIDIA GB10")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": 3}, r"format must be one of \[1, 2\]"),
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
