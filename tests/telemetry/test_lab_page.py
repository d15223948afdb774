"""lab_page.py in real headless Chromium against the console page the packaged Prometheus serves
for doubles of three pairs (conftest.py): it passes and writes the screenshot where every
graph's metrics are served, and fails naming the graphs of a missing target. How it reads a
graph's state from the DOM is held to what prom_console.js renders in each state."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pair_metrics.promql import CONSOLE
from tests.telemetry import lab_page

SCRIPT = Path(lab_page.__file__)
# The graphs of pair.html, by the element each PromConsole.Graph draws in.
GRAPHS = re.findall(r'node: document\.querySelector\("#(\w+)"\)', CONSOLE.read_text("utf-8"))
VLLM_GRAPHS = ["tokens", "latency", "requests", "kv_cache"]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chromium() -> str:
    """Chromium's path; fails the test (never skips) when it is missing."""
    try:
        return lab_page.find_chromium()
    except lab_page.ChromiumMissingError as exc:
        pytest.fail(str(exc), pytrace=False)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    # Without site-packages (-S), as the script must run: on the standard library alone.
    return subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def verdicts(output: str) -> dict[str, str]:
    """Each graph's verdict line of the summary, by the graph's element id."""
    found = re.findall(r"^\s*(ok|NO DATA)\s+\d+ series\s+(\w+) ", output, flags=re.MULTILINE)
    return {graph: verdict for verdict, graph in found}


def test_every_graph_of_a_served_pair_has_data(
    prometheus: str, chromium: str, tmp_path: Path
) -> None:
    shot = tmp_path / "pair_one.png"
    url = f"{prometheus}/consoles/pair.html?pair=pair_one"
    done = run("--url", url, "--screenshot", str(shot), "--chromium", chromium)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert len(GRAPHS) == 9
    assert verdicts(output) == dict.fromkeys(GRAPHS, "ok"), output
    assert "tokens (Tokens per second): 2 of 2 series drawn" in output
    assert f"all {len(GRAPHS)} graphs have data" in output
    assert shot.read_bytes().startswith(PNG) and shot.stat().st_size > 10_000


def test_the_graphs_of_a_missing_target_fail_by_name(
    prometheus: str, chromium: str, tmp_path: Path
) -> None:
    shot = tmp_path / "pair_three.png"
    dom = tmp_path / "pair_three.html"
    url = f"{prometheus}/consoles/pair.html?pair=pair_three"
    done = run("--url", url, "--screenshot", str(shot), "--dom", str(dom))
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    expected = {graph: "NO DATA" if graph in VLLM_GRAPHS else "ok" for graph in GRAPHS}
    assert verdicts(output) == expected, output
    assert "kv_cache (KV cache in use): No timeseries returned" in output
    assert "4 of 9 graphs have no data: ['tokens (Tokens per second)'" in output
    assert shot.read_bytes().startswith(PNG)
    assert dom.read_text("utf-8").count('class="prom_graph_table"') == 9


def _graph(cell: str, ident: str = "g") -> str:
    """A graph as prom_console.js leaves it, with `cell` in its td.rickshaw_graph."""
    return (
        f'<h3>Graph {ident}</h3>\n<div id="{ident}"><table class="prom_graph_table"><tr><td>'
        f'<td class="prom_graph_ytitle">Y</td></td><td class="rickshaw_graph" width="null" '
        f'height="200">{cell}</td></tr></table></div>'
    )


@pytest.mark.parametrize(
    ("cell", "has_data", "detail"),
    [
        (
            '<svg width="900" height="200"><path class="path" d="M898,200L899,100" fill="none">'
            '</path><path class="path" fill="none"></path><path class="stroke"></path></svg>',
            True,
            "1 of 2 series drawn",
        ),
        (
            '<svg width="900" height="200"><path class="path" fill="none"></path>'
            '<path class="stroke"></path><g class="y_ticks plain"><path class="domain" '
            'd="M4,0H0V200H4"></path></g></svg>',
            False,
            "every value NaN or missing: nothing drawn",
        ),
        ('<div class="prom_graph_error">No timeseries returned</div>', False, "No timeseries"),
        ('<div class="prom_graph_error">Error loading data</div>', False, "Error loading data"),
        (
            '<img src="/classic/static/img/ajax-loader.gif" alt="Loading..." '
            'class="prom_graph_loading">',
            False,
            "still loading",
        ),
    ],
)
def test_a_graph_has_data_when_a_series_draws(cell: str, has_data: bool, detail: str) -> None:
    (result,) = lab_page.judge_page(_graph(cell))
    assert (result.name, result.has_data) == ("g (Graph g)", has_data)
    assert detail in result.detail


def test_a_graph_whose_script_failed_has_no_data() -> None:
    drawn = _graph('<svg><path class="path" d="M1,2L3,4"></path></svg>', "drawn")
    page = (
        f'{drawn}<h3>Broken</h3><div id="broken"></div><script>\nnew PromConsole.Graph({{\n'
        f'  node: document.querySelector("#broken"),\n  expr: "up"\n}})\n</script>'
    )
    results = {r.name: (r.has_data, r.detail) for r in lab_page.judge_page(page)}
    assert results == {
        "drawn (Graph drawn)": (True, "1 of 1 series drawn"),
        "broken (Broken)": (False, "not drawn: its script did not run to the end"),
    }


def test_a_page_without_graphs_fails() -> None:
    assert lab_page.judge_page("<html><body><h1>Spark pairs</h1></body></html>") == []
    assert lab_page.summary([]).endswith("the page has no graph")


def test_a_missing_chromium_fails_naming_the_debian_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(lab_page.ChromiumMissingError, match="Debian's chromium package"):
        lab_page.find_chromium()
    shot = tmp_path / "shot.png"
    code = lab_page.main(["--url", "http://127.0.0.1:9/", "--screenshot", str(shot)])
    assert code == 2 and not shot.exists()
    code = lab_page.main(
        ["--url", "http://127.0.0.1:9/", "--screenshot", str(shot), "--chromium", "nowhere"]
    )
    assert code == 2


def test_only_lab_addresses(tmp_path: Path) -> None:
    done = run("--url", "http://8.8.8.8:9090/consoles/pair.html", "--screenshot", "x.png")
    assert done.returncode == 2 and "not a loopback or lab address" in done.stderr
