"""The report from sample result files: table rows, the PNG, the summary and the role's module."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from matplotlib.image import imread
from pair_benchmark.reference import CASES
from pair_benchmark.report import NoResultsError, load_results, write_report
from pair_benchmark.table import build_rows, render_markdown

from tests.helpers import REPO, output_of, run_local_play

SAMPLES = Path(__file__).with_name("samples")
ROLE = REPO / "roles/pair_benchmark"


def table_cells(markdown: str) -> dict[str, list[str]]:
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| case") and "---" not in line:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_rows_follow_the_reference_order_with_measured_values() -> None:
    rows = build_rows(load_results(SAMPLES))
    assert [row.case.name for row in rows] == [case.name for case in CASES]
    by_name = {row.case.name: row for row in rows}
    assert by_name["prefill_12k_cold"].measured == pytest.approx(851.1, abs=0.1)
    assert by_name["prefill_12k_cold"].ratio == pytest.approx(851.1 / 851, abs=1e-3)
    assert by_name["decode_english_prose"].ratio == pytest.approx(33.74 / 34.45, abs=1e-3)
    assert by_name["decode_code"].requests == 3


def test_markdown_table_cells() -> None:
    cells = table_cells(render_markdown(build_rows(load_results(SAMPLES))))
    assert cells["prefill 12k context, warm"][:3] == ["1,346", "1,341", "1.00x"]
    assert cells["decode, code"][:3] == ["42.1", "43.2", "0.97x"]
    assert cells["decode, English prose"][1] == "32.8-36.1"
    assert "512 tokens out" in cells["decode, Korean prose"][3]


def test_case_not_run_is_marked_not_invented(tmp_path: Path) -> None:
    shutil.copy(SAMPLES / "decode_code.json", tmp_path)
    rows = build_rows(load_results(tmp_path))
    cells = table_cells(render_markdown(rows))
    assert cells["prefill 24k context, warm"] == ["—", "1,311", "—", "not run"]
    assert cells["decode, code"][0] == "42.1"


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
    cells = table_cells(text.split("## Other cases")[1])
    prefill, decode, note = cells["decode_my_prompts"]
    assert decode == "42.1"  # the same requests as the reference decode_code sample
    assert prefill != "—" and "median of 3" in note
    assert all(row.measured is None for row in report.rows)
    summary = json.loads(report.summary.read_text(encoding="utf-8"))
    assert [c["case"] for c in summary["other_cases"]] == ["decode_my_prompts"]
    assert summary["other_cases"][0]["decode_tok_s"] == pytest.approx(42.1, abs=0.05)


def test_reference_cases_alone_leave_no_other_section(tmp_path: Path) -> None:
    report = write_report(load_results(SAMPLES), tmp_path / "out", "t", {})
    assert "## Other cases" not in report.markdown.read_text(encoding="utf-8")
    assert json.loads(report.summary.read_text(encoding="utf-8"))["other_cases"] == []


def test_no_result_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NoResultsError):
        write_report({}, tmp_path / "out", "t", {})
    assert not (tmp_path / "out").exists()


def render_in_a_play(tmp_path: Path, results: Path, out: Path) -> tuple[int, str]:
    """Run the role's module twice, as run.yml does; the exit code and the output."""
    task = {
        "pair_benchmark_report": {
            "results_dir": str(results),
            "out": str(out),
            "context": {"pair": "lab_pair"},
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
