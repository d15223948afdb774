"""The report from sample result files: table rows, the PNG, the summary and the role's module."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from matplotlib.image import imread
from pair_benchmark.forecast import load_forecast
from pair_benchmark.load_to_ready import load_to_ready
from pair_benchmark.reference import CASES
from pair_benchmark.report import NoResultsError, load_results, write_report
from pair_benchmark.table import build_rows, render_markdown

from tests.helpers import REPO, output_of, run_local_play

SAMPLES = Path(__file__).with_name("samples")
ROLE = REPO / "roles/pair_benchmark"
# A forecast as the GB10 model's owner writes it, two reference cases and one that is not one.
FORECAST = {
    "gpu": "GB10",
    "cases": {
        "prefill_12k_warm": {"tok_s": 1288.0},
        "decode_code": {"tok_s": 41.0},
        "decode_elsewhere": {"tok_s": 12.0},
    },
}
RANK0_STARTED = "2025-06-01T10:00:31.123456789Z"
READY_RECORD = {
    "pair": "lab_pair",
    "started": "2025-06-01T10:00:00Z",
    "ready": "2025-06-01T10:04:12Z",
    "container_started": {"0": RANK0_STARTED, "1": "2025-06-01T10:00:00.25Z"},
}


def tables(markdown: str) -> list[list[dict[str, str]]]:
    """Each Markdown table of the text, as rows keyed by the table's header."""
    found: list[list[dict[str, str]]] = []
    header: list[str] = []
    for line in [*markdown.splitlines(), ""]:
        if not line.startswith("|"):
            header = []
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not header:
            header = cells
            found.append([])
        elif not set("".join(cells)) <= set("-:"):
            found[-1].append(dict(zip(header, cells, strict=True)))
    return found


def case_rows(markdown: str) -> dict[str, dict[str, str]]:
    """The rows of the first table with a case column, by case."""
    rows = next(rows for rows in tables(markdown) if rows and "case" in rows[0])
    return {row["case"]: row for row in rows}


def test_rows_follow_the_reference_order_with_measured_values() -> None:
    rows = build_rows(load_results(SAMPLES))
    assert [row.case.name for row in rows] == [case.name for case in CASES]
    by_name = {row.case.name: row for row in rows}
    assert by_name["prefill_12k_cold"].measured == pytest.approx(851.1, abs=0.1)
    assert by_name["prefill_12k_cold"].ratio == pytest.approx(851.1 / 851, abs=1e-3)
    assert by_name["decode_english_prose"].ratio == pytest.approx(33.74 / 34.45, abs=1e-3)
    assert by_name["decode_code"].requests == 3


def test_markdown_table_cells() -> None:
    markdown = render_markdown(build_rows(load_results(SAMPLES)))
    assert markdown.splitlines()[0] == (
        "| case | tok/s measured | predicted (GB10 model) | tok/s reference | measured / reference"
        " | TTFT ms (median) | prefill tok/s | decode tok/s | notes |"
    )
    cells = case_rows(markdown)
    warm = cells["prefill 12k context, warm"]
    assert [warm["tok/s measured"], warm["tok/s reference"], warm["measured / reference"]] == [
        "1,346",
        "1,341",
        "1.00x",
    ]
    # Both rates and the TTFT whatever the phase: a prefill case generates one token, no rate.
    assert [warm["TTFT ms (median)"], warm["prefill tok/s"], warm["decode tok/s"]] == [
        "9,129",
        "1,346",
        "—",
    ]
    code = cells["decode, code"]
    assert [code["tok/s measured"], code["tok/s reference"], code["measured / reference"]] == [
        "42.1",
        "43.2",
        "0.97x",
    ]
    assert [code["TTFT ms (median)"], code["decode tok/s"]] == ["159", "42.1"]
    assert code["prefill tok/s"] not in ("—", "")
    assert cells["decode, English prose"]["tok/s reference"] == "32.8-36.1"
    assert "512 tokens out" in cells["decode, Korean prose"]["notes"]
    # No forecast given: the predicted column is there, empty.
    assert {row["predicted (GB10 model)"] for row in cells.values()} == {"—"}


def test_case_not_run_is_marked_not_invented(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "decode_code.json", tmp_path)
    rows = build_rows(load_results(tmp_path))
    cells = case_rows(render_markdown(rows))
    assert list(cells["prefill 24k context, warm"].values()) == [
        "prefill 24k context, warm",
        "—",
        "—",
        "1,311",
        "—",
        "—",
        "—",
        "—",
        "not run",
    ]
    assert cells["decode, code"]["tok/s measured"] == "42.1"


def test_cold_case_says_when_it_was_not_cold(tmp_path: Path) -> None:
    data = json.loads((SAMPLES / "prefill_12k_cold.json").read_text(encoding="utf-8"))
    data["served_before"] = "7"
    (tmp_path / "prefill_12k_cold.json").write_text(json.dumps(data), encoding="utf-8")
    row = next(r for r in build_rows(load_results(tmp_path)) if r.case.name == "prefill_12k_cold")
    assert "not cold: the service had served 7 requests before" in row.note


def test_report_writes_markdown_png_and_summary(tmp_path: Path) -> None:
    report = write_report(load_results(SAMPLES), tmp_path / "out", "pair_one", {"pair": "pair_one"})
    text = report.markdown.read_text(encoding="utf-8")
    assert "# pair_one" in text
    assert "- pair: pair_one" in text
    assert "![measured beside the reference](throughput.png)" in text
    assert "| FP8 + dual-path | 1,341 | 36.5 |" in text
    assert report.figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = imread(report.figure)
    height, width = pixels.shape[:2]
    assert (width, height) == (1440, 576)
    # Non-trivial: the bars put more than background and axes colours on the image.
    assert len({tuple(p) for p in pixels.reshape(-1, pixels.shape[2])[::97]}) > 20
    summary = json.loads(report.summary.read_text(encoding="utf-8"))
    assert [c["case"] for c in summary["cases"]] == [case.name for case in CASES]
    assert summary["cases"][1]["measured_tok_s"] == pytest.approx(1308.0, abs=1.0)


def test_a_case_of_another_name_is_reported_without_a_reference(tmp_path: Path) -> None:
    data = json.loads((SAMPLES / "decode_code.json").read_text(encoding="utf-8"))
    data["case"] = "decode_my_prompts"
    (tmp_path / "mine.json").write_text(json.dumps(data), encoding="utf-8")
    report = write_report(load_results(tmp_path), tmp_path / "out", "t", {})
    text = report.markdown.read_text(encoding="utf-8")
    assert "## Other cases" in text
    mine = case_rows(text.split("## Other cases")[1])["decode_my_prompts"]
    assert mine["decode tok/s"] == "42.1"  # the same requests as the reference decode_code sample
    assert mine["TTFT ms (median)"] == "159"
    assert mine["prefill tok/s"] != "—" and "median of 3" in mine["notes"]
    assert all(row.measured is None for row in report.rows)
    summary = json.loads(report.summary.read_text(encoding="utf-8"))
    assert [c["case"] for c in summary["other_cases"]] == ["decode_my_prompts"]
    assert summary["other_cases"][0]["decode_tok_s"] == pytest.approx(42.1, abs=0.05)
    assert summary["other_cases"][0]["median_ttft_ms"] == pytest.approx(158.7, abs=0.5)


def test_reference_cases_alone_leave_no_other_section(tmp_path: Path) -> None:
    report = write_report(load_results(SAMPLES), tmp_path / "out", "t", {})
    assert "## Other cases" not in report.markdown.read_text(encoding="utf-8")
    assert json.loads(report.summary.read_text(encoding="utf-8"))["other_cases"] == []


def test_no_result_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NoResultsError):
        write_report({}, tmp_path / "out", "t", {})
    assert not (tmp_path / "out").exists()


def write_forecast(directory: Path, data: object) -> Path:
    path = directory / "gb10_forecast.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_forecast_stands_next_to_measured_for_the_cases_it_lists(tmp_path: Path) -> None:
    forecast = load_forecast(write_forecast(tmp_path, FORECAST))
    report = write_report(load_results(SAMPLES), tmp_path / "out", "t", {}, forecast=forecast)
    text = report.markdown.read_text(encoding="utf-8")
    cells = case_rows(text)
    predicted = {case: row["predicted (GB10 model)"] for case, row in cells.items()}
    assert predicted == {
        "prefill 12k context, warm": "1,288",
        "prefill 24k context, warm": "—",
        "first request after start (cold), 12k": "—",
        "decode, code": "41.0",
        "decode, Korean prose": "—",
        "decode, English prose": "—",
    }
    header = text.split("\n## ")[0]
    assert f"- predicted (GB10 model): the GB10 forecast in {tmp_path}/gb10_forecast.json" in header
    summary = json.loads(report.summary.read_text(encoding="utf-8"))
    by_case = {case["case"]: case for case in summary["cases"]}
    assert by_case["prefill_12k_warm"]["predicted_tok_s"] == 1288.0
    assert by_case["decode_code"]["predicted_tok_s"] == 41.0
    assert by_case["decode_korean_prose"]["predicted_tok_s"] is None
    assert summary["forecast"] == {"gpu": "GB10", "source": str(tmp_path / "gb10_forecast.json")}


def test_without_a_forecast_file_the_column_says_so(tmp_path: Path) -> None:
    forecast = load_forecast(tmp_path / "gb10_forecast.json")
    report = write_report(load_results(SAMPLES), tmp_path / "out", "t", {}, forecast=forecast)
    text = report.markdown.read_text(encoding="utf-8")
    assert {row["predicted (GB10 model)"] for row in case_rows(text).values()} == {"—"}
    assert "- predicted (GB10 model): no forecast file; the column says —." in text
    summary = json.loads(report.summary.read_text(encoding="utf-8"))
    assert summary["forecast"] is None
    assert {case["predicted_tok_s"] for case in summary["cases"]} == {None}


def test_the_report_gives_load_to_ready_and_ttft(tmp_path: Path) -> None:
    load = load_to_ready(json.dumps(READY_RECORD), RANK0_STARTED)
    report = write_report(load_results(SAMPLES), tmp_path / "out", "t", {}, load=load)
    text = report.markdown.read_text(encoding="utf-8")
    service = text.split("## The service")[1].split("## The cases")[0]
    (rows,) = tables(service)
    assert rows == [
        {
            "load to ready": "252 s (4 min 12 s)",
            "rank containers started": "2025-06-01 10:00:00 UTC",
            "first answered readiness": "2025-06-01 10:04:12 UTC",
            "notes": "",
        }
    ]
    assert case_rows(text)["first request after start (cold), 12k"]["TTFT ms (median)"] == "14,438"
    summary = json.loads(report.summary.read_text(encoding="utf-8"))
    assert summary["load_to_ready"] == {
        "seconds": 252.0,
        "started": "2025-06-01T10:00:00Z",
        "ready": "2025-06-01T10:04:12Z",
        "note": "",
    }
    cold = next(case for case in summary["cases"] if case["case"] == "prefill_12k_cold")
    assert cold["median_ttft_ms"] == pytest.approx(14437.9, abs=0.1)
    assert cold["prefill_tok_s"] == cold["measured_tok_s"] and cold["decode_tok_s"] is None


def test_an_unknown_load_to_ready_is_a_dash_with_the_reason(tmp_path: Path) -> None:
    report = write_report(
        load_results(SAMPLES), tmp_path / "out", "t", {}, load=load_to_ready("", RANK0_STARTED)
    )
    service = report.markdown.read_text(encoding="utf-8").split("## The service")[1]
    (row,) = tables(service.split("## The cases")[0])[0]
    assert row["load to ready"] == "—"
    assert row["notes"] == "not recorded (rank 0 has no readiness record)"
    assert (
        json.loads(report.summary.read_text(encoding="utf-8"))["load_to_ready"]["seconds"] is None
    )


def render_in_a_play(tmp_path: Path, results: Path, out: Path, **options: str) -> tuple[int, str]:
    """Run the role's module twice, as run.yml does; the exit code and the output."""
    task = {
        "pair_benchmark_report": {
            "results_dir": str(results),
            "out": str(out),
            "context": {"pair": "lab_pair"},
            **options,
        },
        "register": "rendered",
    }
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [task, task]}]
    result = run_local_play(
        tmp_path,
        play,
        f"ANSIBLE_LIBRARY={ROLE / 'library'}",
        f"ANSIBLE_MODULE_UTILS={ROLE / 'module_utils'}",
    )
    return result.returncode, output_of(result)


def test_the_module_writes_the_report_once(tmp_path: Path) -> None:
    out = tmp_path / "report"
    code, output = render_in_a_play(tmp_path, SAMPLES, out)
    assert code == 0, output
    assert "- pair: lab_pair" in (out / "report.md").read_text(encoding="utf-8")
    assert (out / "throughput.png").stat().st_size > 20_000
    assert "changed=1" in output  # the second run finds the report and leaves it


def test_the_module_fails_on_an_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    code, output = render_in_a_play(tmp_path, tmp_path / "results", tmp_path / "out")
    assert code != 0
    assert "no result: nothing to report" in output
    assert not (tmp_path / "out").exists()


def test_the_module_reports_the_forecast_and_load_to_ready(tmp_path: Path) -> None:
    out = tmp_path / "report"
    code, output = render_in_a_play(
        tmp_path,
        SAMPLES,
        out,
        forecast=str(write_forecast(tmp_path, FORECAST)),
        ready_record=json.dumps(READY_RECORD),
        service_started=RANK0_STARTED,
    )
    assert code == 0, output
    text = (out / "report.md").read_text(encoding="utf-8")
    assert case_rows(text)["decode, code"]["predicted (GB10 model)"] == "41.0"
    assert "| 252 s (4 min 12 s) |" in text
    assert json.loads((out / "summary.json").read_text(encoding="utf-8"))["load_to_ready"][
        "seconds"
    ] == pytest.approx(252)


def test_the_module_reports_without_a_readable_forecast_and_warns(tmp_path: Path) -> None:
    broken = write_forecast(tmp_path, {"gpu": "GB10", "cases": {"decode_code": {"tok_s": "fast"}}})
    code, output = render_in_a_play(tmp_path, SAMPLES, tmp_path / "out", forecast=str(broken))
    assert code == 0, output
    assert "unreadable forecast" in output and "'tok_s' is not a number" in output
    text = (tmp_path / "out/report.md").read_text(encoding="utf-8")
    assert {row["predicted (GB10 model)"] for row in case_rows(text).values()} == {"—"}
    assert "- predicted (GB10 model): unreadable forecast (" in text
    assert "not recorded (rank 0 has no readiness record)" in text
