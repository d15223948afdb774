#!/usr/bin/env python3
"""Whether every graph of a Prometheus console page has data, as a browser shows it: the page
opened in headless Chromium, its JavaScript run, its DOM dumped and a screenshot taken.

Each graph of the console library (PromConsole.Graph of prom_console.js, drawn by Rickshaw) is a
table.prom_graph_table in the element its script names; prom_console.js then leaves in the
graph's td.rickshaw_graph one of:

* an svg with a path.path per series, whose `d` draws the series (data), or which has no `d`
  when every value of the series is NaN or missing (nothing drawn);
* div.prom_graph_error "No timeseries returned" (no query found a series) or "Error loading
  data" (a request failed);
* img.prom_graph_loading, still there when Prometheus answered a query with an error (which
  prom_console.js does not show) or did not answer.

A graph has data when at least one of its series draws. Exit 0 when every graph has, 1 naming
those that have not (or when the page has no graph), 2 when Chromium is missing or an argument
is wrong. Only loopback or private (lab) addresses.

    lab_page.py --url 'http://172.17.0.5:9090/consoles/pair.html?pair=pair_one' \
        --screenshot pair_one.png
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: request_stream's address check, from the repo
    sys.path.insert(0, str(REPO))
from tests.update.request_stream import TargetNotAllowedError, check_target  # noqa: E402 (above)

CHROMIUM_NAMES = ("chromium", "chromium-browser")
MISSING_CHROMIUM = (
    "no Chromium found ({names} on PATH): bin/setup installs Debian's chromium package "
    "(apt-get install chromium)"
)
WINDOW = "1400,2000"
VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}
)
HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6"})
# The element a console script hands PromConsole.Graph: querySelector("#id") or getElementById.
GRAPH_NODE = re.compile(
    r"""new\s+PromConsole\.Graph\(\s*\{.*?node:\s*document\.(?:querySelector\(\s*["']#"""
    r"""|getElementById\(\s*["'])([\w-]+)["']""",
    re.DOTALL,
)


class ChromiumMissingError(RuntimeError):
    pass


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parent: Element | None = None
    children: list[Element | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.walk()

    def find(self, tag: str, css_class: str) -> list[Element]:
        return [e for e in self.walk() if e.tag == tag and css_class in e.classes]

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)


class _TreeBuilder(HTMLParser):
    """The DOM as Chromium serializes it (every element but the void ones closed)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self._open = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs}, self._open)
        self._open.children.append(element)
        if tag not in VOID:
            self._open = element

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {name: value or "" for name, value in attrs}, self._open)
        self._open.children.append(element)

    def handle_endtag(self, tag: str) -> None:
        node: Element | None = self._open
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:  # a stray end tag closes nothing
            self._open = node.parent

    def handle_data(self, data: str) -> None:
        self._open.children.append(data)


def parse_dom(html: str) -> Element:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


@dataclass(frozen=True)
class GraphResult:
    name: str  # the id of its element, and the heading above it
    has_data: bool
    series: int
    detail: str


def _heading_before(node: Element) -> str:
    """The text of the nearest heading before `node` among its earlier siblings."""
    parent = node.parent
    if parent is None:
        return ""
    before = parent.children[: parent.children.index(node)]
    for sibling in reversed(before):
        if isinstance(sibling, Element) and sibling.tag in HEADINGS:
            return " ".join(sibling.text().split())
    return ""


def _name(node: Element) -> str:
    ident = node.attrs.get("id", "")
    heading = _heading_before(node)
    return f"{ident} ({heading})" if ident and heading else ident or heading or "unnamed graph"


def judge_graph(table: Element) -> GraphResult:
    """What prom_console.js left in one graph (table.prom_graph_table)."""
    name = _name(table.parent) if table.parent is not None else "unnamed graph"
    cells = table.find("td", "rickshaw_graph")
    if not cells:
        return GraphResult(name, False, 0, "no td.rickshaw_graph: not a console graph")
    cell = cells[0]
    series = cell.find("path", "path")
    drawn = [path for path in series if re.search(r"\d", path.attrs.get("d", ""))]
    if drawn:
        return GraphResult(name, True, len(series), f"{len(drawn)} of {len(series)} series drawn")
    if series:
        return GraphResult(name, False, len(series), "every value NaN or missing: nothing drawn")
    errors = [" ".join(e.text().split()) for e in cell.find("div", "prom_graph_error")]
    if errors:
        return GraphResult(name, False, 0, "; ".join(errors))
    if cell.find("img", "prom_graph_loading"):
        return GraphResult(
            name, False, 0, "still loading: a query failed in Prometheus or did not answer"
        )
    return GraphResult(name, False, 0, "nothing drawn")


def judge_page(html: str) -> list[GraphResult]:
    """Every graph of the page; a graph whose script named an element left without a graph
    (its script failed before drawing) counts as one without data."""
    root = parse_dom(html)
    results = [judge_graph(table) for table in root.find("table", "prom_graph_table")]
    scripts = "\n".join(e.text() for e in root.walk() if e.tag == "script")
    by_id = {e.attrs["id"]: e for e in root.walk() if "id" in e.attrs}
    for ident in GRAPH_NODE.findall(scripts):
        node = by_id.get(ident)
        if node is None:
            results.append(GraphResult(ident, False, 0, "its element is not on the page"))
        elif not node.find("table", "prom_graph_table"):
            detail = "not drawn: its script did not run to the end"
            results.append(GraphResult(_name(node), False, 0, detail))
    return results


def find_chromium(explicit: str | None = None) -> str:
    if explicit is not None:
        found = shutil.which(explicit)
        if found is None:
            raise ChromiumMissingError(f"{explicit}: no such executable")
        return found
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found is not None:
            return found
    raise ChromiumMissingError(MISSING_CHROMIUM.format(names=", ".join(CHROMIUM_NAMES)))


def chromium_command(chromium: str, url: str, screenshot: Path, profile: Path) -> list[str]:
    return [
        chromium,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--window-size={WINDOW}",
        f"--user-data-dir={profile}",
        "--no-first-run",
        # Virtual time runs on only while no request is pending: the DOM and the screenshot are
        # taken once every graph's queries were answered and drawn.
        "--virtual-time-budget=10000",
        f"--screenshot={screenshot}",
        "--dump-dom",
        url,
    ]


def open_page(chromium: str, url: str, screenshot: Path, timeout_s: float) -> str:
    """The page's DOM after its scripts ran; the screenshot written. Raises RuntimeError."""
    screenshot = screenshot.resolve()
    screenshot.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="lab-page-") as profile:
        command = chromium_command(chromium, url, screenshot, Path(profile))
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"Chromium did not finish in {timeout_s:g} s") from exc
    if done.returncode != 0:
        raise RuntimeError(f"Chromium exited {done.returncode}: {done.stderr[-2000:]}")
    if not screenshot.is_file() or screenshot.stat().st_size == 0:
        raise RuntimeError(f"Chromium wrote no screenshot at {screenshot}: {done.stderr[-2000:]}")
    return done.stdout


def page_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: give the page as http://host:port/consoles/<page>")
    check_target(parts.hostname)
    return url


def summary(results: Sequence[GraphResult]) -> str:
    lines = [
        f"{'ok' if r.has_data else 'NO DATA':>7}  {r.series:>3} series  {r.name}: {r.detail}"
        for r in results
    ]
    empty = [r.name for r in results if not r.has_data]
    if not results:
        lines.append("the page has no graph")
    elif empty:
        lines.append(f"{len(empty)} of {len(results)} graphs have no data: {empty}")
    else:
        lines.append(f"all {len(results)} graphs have data")
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the console page, with its parameters")
    parser.add_argument("--screenshot", required=True, type=Path, help="PNG written here")
    parser.add_argument("--chromium", help="Chromium's executable (default: chromium on PATH)")
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds Chromium may take")
    parser.add_argument("--dom", type=Path, help="also write the DOM Chromium dumped here")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        url = page_url(args.url)
        chromium = find_chromium(args.chromium)
    except (ValueError, TargetNotAllowedError, ChromiumMissingError) as exc:
        print(f"lab_page: {exc}", file=sys.stderr)
        return 2
    try:
        html = open_page(chromium, url, args.screenshot, args.timeout)
    except RuntimeError as exc:
        print(f"lab_page: {exc}", file=sys.stderr)
        return 1
    if args.dom is not None:
        args.dom.write_text(html, encoding="utf-8")
    results = judge_page(html)
    print(summary(results), flush=True)
    print(f"screenshot: {args.screenshot}", flush=True)
    return 0 if results and all(result.has_data for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
