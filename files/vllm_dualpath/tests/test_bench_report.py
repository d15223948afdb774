"""The benchmark report's target checks (no GPU needed)."""

from __future__ import annotations

import json

import pytest

import calibration_report
import model_report
from bench_report import checks


def _result(dual_small: float, dual_large: float, unpack_gbps: float) -> dict:
    rows = []
    for m, dual in ((1, dual_small), (4096, dual_large)):
        times = {"bf16": 100.0, "marlin": 80.0 if m == 1 else 250.0, "unpack_cublas": 104.0}
        times["dualpath"] = dual
        rows += [{"n": 64, "k": 128, "m": m, "path": p, "median_us": t} for p, t in times.items()]
    return {
        "gpu": "test",
        "copy_gbps": 4000.0,
        "unpack_gbps": {"64x128": unpack_gbps},
        "rows": rows,
    }


def test_targets_met() -> None:
    found = checks(_result(dual_small=81.0, dual_large=104.0, unpack_gbps=3700.0))
    assert len(found) == 4
    assert all(c.met for c in found), found


@pytest.mark.parametrize(
    ("dual_small", "dual_large", "unpack_gbps", "missed"),
    [
        (82.0, 104.0, 3700.0, "Marlin at M <= 20"),  # 1.025x Marlin
        (81.0, 106.0, 3700.0, "BF16 at M >= 4096"),  # 1.06x BF16 and 1.019x the best
        (81.0, 104.0, 3500.0, "device copy"),  # 87.5 % of copy
        (81.0, 108.0, 3700.0, "min(Marlin"),  # 1.038x the best path
    ],
)
def test_each_target_can_be_missed(dual_small, dual_large, unpack_gbps, missed) -> None:
    result = checks(_result(dual_small, dual_large, unpack_gbps))
    assert [c.target for c in result if not c.met and missed in c.target], result


@pytest.fixture
def ahead_from_2048(monkeypatch):
    """Unpack ahead from M = 2048 only, so the two M of ``_model_result`` take different paths."""
    monkeypatch.setattr(model_report.settings, "DEFAULT_UNPACK_AHEAD_MIN_M", 2048)


def test_the_default_path_is_ahead_from_the_large_m_threshold_up() -> None:
    assert model_report.default_path(1024, {}) == "unpack_ahead"
    assert model_report.default_path(8192, {}) == "unpack_ahead"
    deeper = {"default_ahead_depth": 2}
    assert model_report.default_path(1024, deeper) == "unpack_ahead_depth2"


def _model_result(inline_1024: float, ahead_4096: float) -> dict:
    """With ``ahead_from_2048``, only the path the op takes at each M decides: in line at 1024,
    ahead at 4096."""
    rows = []
    for m, inline, ahead in ((1024, inline_1024, 90.0), (4096, 95.0, ahead_4096)):
        times = {"bf16": 100.0, "marlin": 250.0, "unpack_cublas": inline, "unpack_ahead": ahead}
        rows += [{"m": m, "path": p, "median_us": t, "host_us": 50.0} for p, t in times.items()]
    return {
        "gpu": "test",
        "layers": [{"name": "qkv_proj", "n": 64, "k": 128}],
        "rows": rows,
        "scratch_bytes": {"plain": 16384, "ahead": 32768},
    }


@pytest.mark.parametrize(
    ("inline_1024", "ahead_4096", "met"),
    [(109.0, 102.0, [True, True]), (111.0, 102.0, [False, True]), (105.0, 104.0, [True, False])],
)
def test_model_targets_use_the_default_path_at_each_m(
    ahead_from_2048, inline_1024, ahead_4096, met
) -> None:
    lines = model_report.target_lines(_model_result(inline_1024, ahead_4096))
    assert [where for where, *_ in lines] == ["M = 1024", "M >= 2048"]
    assert [ok for *_, ok in lines] == met
    table = model_report.markdown(_model_result(inline_1024, ahead_4096))
    assert "| 4096 | 100 | 2.500x | 0.950x |" in table and "32,768 more" in table
    assert "| unpack_ahead |" in table and "| unpack_cublas |" in table


def test_model_table_states_host_call_costs_when_measured() -> None:
    result = _model_result(105.0, 102.0)
    assert "Host time to issue one call" not in model_report.markdown(result)
    result["host_call_us"] = {
        "shape": "qkv_proj",
        "m": 512,
        "unpack_launch": 12.25,
        "unpack_launch_dispatched": 31.5,
        "linear": 9.5,
    }
    table = model_report.markdown(result)
    assert "(qkv_proj, M = 512): 12.2 us for the unpack's launch as the op repeats it" in table
    assert "(31.5 us through Triton's dispatch), 9.5 us for `F.linear`" in table


def test_model_table_names_the_timing_and_shows_clocks_when_measured() -> None:
    result = _model_result(105.0, 102.0)
    table = model_report.markdown(result)
    assert table.startswith("Timing: `isolated` (each pass timed alone")
    assert "SM clock" not in table
    result["timing"] = "queued"
    for row in result["rows"]:
        row["sm_clock_mhz"] = 1500.0 if row["path"] == "bf16" else 1755.0
    table = model_report.markdown(result)
    assert table.startswith("Timing: `queued` (passes timed back to back")
    assert "| 4096 | 1500 | 1755 | 1755 | 1755 |" in table


def test_model_table_states_how_much_unpacking_ahead_hides(ahead_from_2048) -> None:
    # At 1024: in line 120 us and ahead 90 us against BF16's 100; at 4096 in line costs 95.
    table = model_report.markdown(_model_result(120.0, 102.0))
    assert "| 1024 | 100 | 2.500x | 1.200x | 0.900x | 150% | unpack_cublas |" in table
    assert "| 4096 | 100 | 2.500x | 0.950x | 1.020x | - | unpack_ahead |" in table
    paths = {
        "bf16": {"median_us": 100.0},
        "unpack_cublas": {"median_us": 120.0},
        "unpack_ahead": {"median_us": 125.0},
    }
    assert model_report.ahead_hides(paths) == pytest.approx(-0.25)


def test_decoder_step_results_are_not_judged_on_the_dense_targets() -> None:
    result = _model_result(111.0, 104.0)
    assert "Step: `dense`" in model_report.markdown(result)
    result.update(step="decoder", link_gbs=200.0)
    assert model_report.target_lines(result) == []
    table = model_report.markdown(result)
    assert "| target:" not in table
    assert "all-reduce stand-in after o_proj and after the shared expert at 200 GB/s" in table
    result["link_gbs"] = None
    assert "no all-reduce stand-in" in model_report.markdown(result)


def test_several_results_are_reported_one_after_another(ahead_from_2048, tmp_path, capsys) -> None:
    dense = _model_result(111.0, 102.0)
    decoder = {**_model_result(120.0, 101.0), "step": "decoder", "link_gbs": 200.0}
    files = []
    for name, result in (("dense", dense), ("decoder", decoder)):
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps(result))
    markdown, png = tmp_path / "both.md", tmp_path / "both.png"
    assert (
        model_report.main([*map(str, files), "--markdown", str(markdown), "--png", str(png)]) == 0
    )
    text = markdown.read_text()
    first = text.index("### dense step, isolated passes")
    second = text.index("### decoder step, link 200 GB/s, isolated passes")
    assert first < text.index("| M = 1024 | 1.110 | 1.10 | **no** |") < second
    assert text.count("| target:") == 1
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "MISSED dual path / bf16 at M = 1024: 1.110" in capsys.readouterr().out


def test_two_ahead_is_a_column_and_judged_when_it_was_the_default(tmp_path) -> None:
    result = _model_result(105.0, 102.0)
    result["rows"] += [
        {"m": m, "path": "unpack_ahead_depth2", "median_us": 112.0, "host_us": 50.0}
        for m in (1024, 4096)
    ]
    table = model_report.markdown(result)
    assert "| unpack ahead | two ahead | hidden |" in table
    assert "| 1024 | 100 | 2.500x | 1.050x | 0.900x | 1.120x |" in table
    assert [met for *_, met in model_report.target_lines(result)] == [True, True]
    result["default_ahead_depth"] = 2  # measured when the op went two layers ahead
    assert [met for *_, met in model_report.target_lines(result)] == [False, False]
    assert "| 4096 | 100 | 2.500x | 0.950x | 1.020x | 1.120x | - | unpack_ahead_depth2 |" in (
        model_report.markdown(result)
    )
    assert "32,768 more for the unpack-ahead double buffer" in model_report.markdown(result)
    result["scratch_bytes"]["ahead_slot"] = 16384
    assert (
        "16,384 more for each unpack-ahead buffer (depth + 1 of them: 49,152 bytes at the "
        "default depth, 2)"
    ) in model_report.markdown(result)
    png = tmp_path / "two.png"
    model_report.plot(result, png)
    assert png.read_bytes().startswith(b"\x89PNG")


def test_panels_plot_one_panel_per_result(tmp_path, monkeypatch) -> None:
    from matplotlib.figure import Figure

    saved: list[Figure] = []
    original = Figure.savefig
    monkeypatch.setattr(
        Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), original(fig, *a, **k))
    )
    files = []
    for index, step in enumerate(("dense", "decoder", "decoder", "decoder")):
        result = {**_model_result(111.0, 102.0), "step": step}
        files.append(tmp_path / f"{index}.json")
        files[-1].write_text(json.dumps(result))
    png = tmp_path / "panels.png"
    assert model_report.main([*map(str, files), "--panels", "--png", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")
    panels = [axis for axis in saved[-1].axes if axis.get_visible()]
    assert len(panels) == 4
    assert [len(axis.get_lines()) for axis in panels] == [3, 3, 3, 3]  # 2 paths + BF16's line
    assert model_report.main([*map(str, files), "--png", str(tmp_path / "shared.png")]) == 0
    assert len([axis for axis in saved[-1].axes if axis.get_visible()]) == 2


def _calibrated(ratios: list[float]) -> dict:
    rows = [
        {"m": 24 + 8 * i, "marlin": 10.0, "unpack_cublas": 12.0, "dualpath": 10.0 * r, "ratio": r}
        for i, r in enumerate(ratios)
    ]
    shape = {"name": "shared_gate_up", "n": 2048, "k": 4096}
    return {"gpu": "test", "shape": shape, "unpack_ranges": [[41, None]], "rows": rows}


def test_the_calibration_report_names_the_worst_m_and_fails_over_three_percent(tmp_path) -> None:
    good, bad = _calibrated([1.0, 1.01, 1.02]), _calibrated([1.0, 1.05, 1.01])
    assert calibration_report.summary(bad)["over"] == 1
    assert calibration_report.summary(bad)["worst_m"] == 32
    assert "41 and up" in calibration_report.markdown([good])
    assert calibration_report.ranges_text([]) == "none (Marlin at every M)"
    paths = []
    for name, result in (("good", good), ("bad", bad)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(result))
    assert calibration_report.main([str(paths[0])]) == 0
    assert calibration_report.main([str(p) for p in paths]) == 1
