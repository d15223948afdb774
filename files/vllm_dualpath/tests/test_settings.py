"""Environment settings: defaults, parsing, and errors that name the variable."""

from __future__ import annotations

import pytest

from vllm_dualpath import settings


def test_defaults_with_an_empty_environment():
    current = settings.load({})
    assert current == settings.Settings()
    assert (current.small_m_max, current.large_m_min) == (20, 1024)
    assert current.enabled and not current.strict
    assert current.channel_scale == settings.CHANNEL_SCALE_EPILOGUE
    assert (current.unpack_ahead_min_m, current.unpack_ahead_depth) == (1024, 1)
    assert (current.stats_dir, current.report_interval_s) == (None, 60)


def test_values_are_read(tmp_path):
    table = tmp_path / "table.json"
    table.write_text("{}")
    current = settings.load(
        {
            "DUALPATH_ENABLED": "off",
            "DUALPATH_SMALL_M_MAX": "32",
            "DUALPATH_LARGE_M_MIN": " 256 ",
            "DUALPATH_CALIBRATION_TABLE": str(table),
            "DUALPATH_STRICT": "Yes",
            "DUALPATH_CHANNEL_SCALE": "unpack",
            "DUALPATH_UNPACK_AHEAD": "0",
            "DUALPATH_UNPACK_AHEAD_MIN_M": "4096",
            "DUALPATH_UNPACK_AHEAD_DEPTH": "2",
            "DUALPATH_STATS_DIR": f" {tmp_path / 'not yet made'} ",
            "DUALPATH_REPORT_INTERVAL_S": "0",
        }
    )
    assert current == settings.Settings(
        False, 32, 256, table, True, "unpack", False, 4096, 2, tmp_path / "not yet made", 0
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DUALPATH_ENABLED", "maybe"),
        ("DUALPATH_STRICT", "2"),
        ("DUALPATH_SMALL_M_MAX", "twenty"),
        ("DUALPATH_SMALL_M_MAX", "-1"),
        ("DUALPATH_LARGE_M_MIN", "1e3"),
        ("DUALPATH_CHANNEL_SCALE", "kernel"),
        ("DUALPATH_UNPACK_AHEAD", "sometimes"),
        ("DUALPATH_UNPACK_AHEAD_MIN_M", "2k"),
        ("DUALPATH_UNPACK_AHEAD_DEPTH", "two"),
        ("DUALPATH_UNPACK_AHEAD_DEPTH", "0"),
        ("DUALPATH_UNPACK_AHEAD_DEPTH", "4"),
        ("DUALPATH_CALIBRATION_TABLE", "relative/table.json"),
        ("DUALPATH_STATS_DIR", "relative/stats"),
        ("DUALPATH_REPORT_INTERVAL_S", "-1"),
        ("DUALPATH_REPORT_INTERVAL_S", "0.5"),
        ("DUALPATH_REPORT_INTERVAL_S", "1m"),
    ],
)
def test_invalid_value_is_an_error_naming_the_variable(variable, value):
    with pytest.raises(settings.SettingsError, match=variable):
        settings.load({variable: value})


def test_thresholds_must_leave_the_large_one_above_the_small_one():
    with pytest.raises(settings.SettingsError, match="DUALPATH_LARGE_M_MIN=64 must be greater"):
        settings.load({"DUALPATH_SMALL_M_MAX": "64", "DUALPATH_LARGE_M_MIN": "64"})


def test_an_unpack_ahead_depth_out_of_range_says_what_is_allowed():
    with pytest.raises(settings.SettingsError, match="must be between 1 and 3 layers"):
        settings.load({"DUALPATH_UNPACK_AHEAD_DEPTH": "4"})
    with pytest.raises(settings.SettingsError, match="not a whole number of layers"):
        settings.load({"DUALPATH_UNPACK_AHEAD_DEPTH": "1.5"})


def test_the_call_report_settings_say_what_is_wrong():
    with pytest.raises(settings.SettingsError, match="must be an absolute path"):
        settings.load({"DUALPATH_STATS_DIR": "stats"})
    with pytest.raises(settings.SettingsError, match="not a whole number of seconds"):
        settings.load({"DUALPATH_REPORT_INTERVAL_S": "0.5"})
    assert settings.load({"DUALPATH_STATS_DIR": "  "}).stats_dir is None


def test_enabled_reads_its_own_variable_only():
    broken = {"DUALPATH_LARGE_M_MIN": "lots", "DUALPATH_CALIBRATION_TABLE": "/nonexistent.json"}
    assert settings.enabled({**broken, "DUALPATH_ENABLED": "0"}) is False
    assert settings.enabled({}) is True
    with pytest.raises(settings.SettingsError, match="DUALPATH_ENABLED"):
        settings.enabled({"DUALPATH_ENABLED": "maybe"})
