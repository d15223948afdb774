"""panel_data.py against the packaged Prometheus scraping doubles of three pairs (conftest.py):
run as the molecule scenario runs it, it passes where every panel's metric is served and fails
naming each panel that finds nothing, only NaN or an error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pair_dashboards.dashboard import panel_queries

from tests.telemetry import panel_data

SCRIPT = Path(panel_data.__file__)
ANNOTATION = "annotation: Overlay release switched"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # Without site-packages (-S), as the script must run: on the standard library alone.
    return subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def checked(prometheus: str, pair: str, tmp_path: Path, *more: str) -> tuple[int, str, Any]:
    report = tmp_path / "panels.json"
    done = run("--prometheus", prometheus, "--pair", pair, "--report", str(report), *more)
    assert report.is_file(), done.stdout + done.stderr
    return done.returncode, done.stdout + done.stderr, json.loads(report.read_text())


def test_every_panel_of_a_served_pair_has_data(prometheus: str, tmp_path: Path) -> None:
    code, output, report = checked(prometheus, "pair_one", tmp_path)
    assert code == 0, output
    assert [(p["title"], p["promql"]) for p in report["panels"]] == panel_queries("pair_one")
    assert report["failed"] == []
    for panel in report["panels"]:
        if panel["title"] == ANNOTATION:  # no release switched: no event to mark
            assert (panel["status"], panel["series"]) == ("events", 0), panel
        else:
            assert panel["status"] == "ok" and panel["series"] >= 1, panel
            assert f"{panel['series']:>3} series  {panel['title']}" in output
    assert "all 26 panel queries have data" in output


def test_a_panel_whose_metric_is_not_served_fails_by_name(prometheus: str, tmp_path: Path) -> None:
    code, output, report = checked(prometheus, "pair_two", tmp_path)
    assert code == 1, output
    assert report["failed"] == ["KV-cache use: KV cache"]
    assert "have no data: ['KV-cache use: KV cache']" in output


def test_every_panel_of_a_missing_target_fails(prometheus: str, tmp_path: Path) -> None:
    code, output, report = checked(prometheus, "pair_three", tmp_path)
    assert code == 1, output
    vllm = [title for title, expr in panel_queries("pair_three") if "vllm:" in expr]
    assert len(vllm) == 10
    assert report["failed"] == vllm
    assert {p["status"] for p in report["panels"] if p["title"] in vllm} == {"no series"}


def test_queries_from_a_file_name_errors_and_nan(prometheus: str, tmp_path: Path) -> None:
    queries = [
        {"title": "Up", "promql": 'up{pair="pair_one"}'},
        {"title": "Broken", "promql": 'rate(up{pair="pair_one"}['},
        {"title": "NaN", "promql": 'up{pair="pair_one"} * NaN'},
        {"title": "annotation: quiet", "promql": 'up{pair="nowhere"}'},
    ]
    path = tmp_path / "pair-pair_one.json"
    path.write_text(json.dumps(queries), encoding="utf-8")
    code, output, report = checked(prometheus, "pair_one", tmp_path, "--queries", str(path))
    assert code == 1, output
    assert report["failed"] == ["Broken", "NaN"]
    statuses = {p["title"]: (p["status"], p["series"]) for p in report["panels"]}
    assert statuses == {
        "Up": ("ok", 5),
        "Broken": ("error", 0),
        "NaN": ("only NaN", 5),
        "annotation: quiet": ("events", 0),
    }
    broken = next(p for p in report["panels"] if p["title"] == "Broken")
    assert "bad_data" in broken["error"] and "parse error" in broken["error"]


def test_only_lab_addresses_and_real_query_files(tmp_path: Path) -> None:
    refused = run("--prometheus", "http://8.8.8.8:9090", "--pair", "pair_one")
    assert refused.returncode == 2
    assert "not a loopback or lab address" in refused.stderr
    wrong = tmp_path / "queries.json"
    wrong.write_text('{"title": "x"}', encoding="utf-8")
    args = ("--prometheus", "http://127.0.0.1:9", "--pair", "p", "--queries", str(wrong))
    refused = run(*args)
    assert refused.returncode == 2 and "not a list of" in refused.stderr
    wrong.write_text("[]", encoding="utf-8")
    refused = run(*args)
    assert refused.returncode == 2 and "no panel query" in refused.stderr
