"""The Prometheus metric families a vLLM release defines, read from its sources without importing
them: every `name="vllm:..."` given to a gauge, counter or histogram constructor in the stat
logger (vllm/v1/metrics/loggers.py) and the speculative-decoding counters (named in tuples in
vllm/v1/spec_decode/metrics.py), with the type and the label names each is made with.

The sources are the unpacked sdists that bin/test fetches into .cache/vllm-sdist
(files/vllm_dualpath/tests/fetch_vllm_sdists.py); DUALPATH_VLLM_SDIST_DIR points elsewhere, as for
the overlay's contract tests."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import REPO

SDIST_DIR = Path(os.environ.get("DUALPATH_VLLM_SDIST_DIR", REPO / ".cache/vllm-sdist"))
EXTRACTED_MARKER = ".extracted"  # what fetch_vllm_sdists.py leaves in a complete tree
MODULES = ("vllm/v1/metrics/loggers.py", "vllm/v1/spec_decode/metrics.py")
CONSTRUCTORS: dict[str, str] = {
    "_gauge_cls": "gauge",
    "_counter_cls": "counter",
    "_histogram_cls": "histogram",
    "Gauge": "gauge",
    "Counter": "counter",
    "Histogram": "histogram",
}
FETCH = "python files/vllm_dualpath/tests/fetch_vllm_sdists.py"


@dataclass(frozen=True)
class Family:
    name: str  # as the source names it (a counter is exposed with _total appended)
    type: str
    labels: tuple[str, ...] | None  # None where the source builds them at run time
    help: str | None  # the documentation string, None where it is not a literal


def source_root(version: str) -> Path:
    """The unpacked vllm-VERSION tree; AssertionError saying how to fetch it when missing."""
    root = SDIST_DIR / "src" / f"vllm-{version}"
    assert (root / EXTRACTED_MARKER).is_file(), (
        f"vLLM {version} sources are not at {root}: fetch them with `{FETCH}` from the repository "
        "root (bin/test does)"
    )
    return root


def exposed_name(family: Family) -> str:
    """The name a query uses: prometheus_client ends every counter with _total."""
    if family.type == "counter" and not family.name.endswith("_total"):
        return family.name + "_total"
    return family.name


def _constructor(call: ast.Call) -> str | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    return CONSTRUCTORS.get(name or "")


def _assignments(function: ast.FunctionDef) -> dict[str, ast.expr]:
    """Simple `name = value` and `self.name = value` in a function, last one winning."""
    found: dict[str, ast.expr] = {}
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                found[target.id] = node.value
            elif isinstance(target, ast.Attribute):
                found["self." + target.attr] = node.value
    return found


def _labels(node: ast.expr | None, scope: dict[str, ast.expr], depth: int = 0) -> list[str] | None:
    """Evaluate a labelnames expression of string lists, names and `+`; None if it is not that."""
    if node is None or depth > 5:
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.List | ast.Tuple):
        parts = [_labels(element, scope, depth + 1) for element in node.elts]
        return None if any(part is None for part in parts) else [x for p in parts if p for x in p]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _labels(node.left, scope, depth + 1), _labels(node.right, scope, depth + 1)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.Name):
        return _labels(scope.get(node.id), scope, depth + 1)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return _labels(scope.get(f"{node.value.id}.{node.attr}"), scope, depth + 1)
    return None


def _families(tree: ast.Module, default_labels: list[str]) -> dict[str, Family]:
    """The families a module constructs. Label names that arrive as a parameter are the stat
    logger's (`default_labels`), which it passes to every helper that makes metrics."""
    found: dict[str, Family] = {}
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        scope = {"labelnames": ast.List([ast.Constant(x) for x in default_labels])}
        scope.update(_assignments(function))
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and (kind := _constructor(node)):
                keywords = {k.arg: k.value for k in node.keywords if k.arg}
                name = keywords.get("name")
                if isinstance(name, ast.Name):  # name = "vllm:cache_config_info"; Gauge(name=name)
                    name = scope.get(name.id)
                if isinstance(name, ast.Constant) and str(name.value).startswith("vllm:"):
                    labels = _labels(keywords.get("labelnames"), scope)
                    found[name.value] = Family(name.value, kind, _tuple(labels), _text(keywords))
            # ("vllm:spec_decode_num_drafts", "doc"): the spec-decode counters, made in a loop
            # with the stat logger's label names.
            if (
                isinstance(node, ast.Tuple)
                and len(node.elts) == 2
                and isinstance(node.elts[0], ast.Constant)
                and str(node.elts[0].value).startswith("vllm:")
            ):
                name, doc = str(node.elts[0].value), node.elts[1]
                text = doc.value if isinstance(doc, ast.Constant) else None
                found[name] = Family(name, "counter", tuple(default_labels), text)
    return found


def _text(keywords: dict[str, ast.expr]) -> str | None:
    doc = keywords.get("documentation")
    return doc.value if isinstance(doc, ast.Constant) and isinstance(doc.value, str) else None


def _tuple(labels: list[str] | None) -> tuple[str, ...] | None:
    return None if labels is None else tuple(labels)


def families(version: str) -> dict[str, Family]:
    """Every family of the stat logger and the spec-decode counters of vLLM `version`, by the
    name a query uses."""
    root = source_root(version)
    loggers = ast.parse((root / MODULES[0]).read_text(encoding="utf-8"))
    init_labels = _stat_logger_labels(loggers)
    found: dict[str, Family] = {}
    for module in MODULES:
        tree = ast.parse((root / module).read_text(encoding="utf-8"))
        found.update(_families(tree, init_labels))
    return {exposed_name(family): family for family in found.values()}


def _stat_logger_labels(loggers: ast.Module) -> list[str]:
    """`labelnames = [...]` of PrometheusStatLogger.__init__: the labels of most families."""
    for node in ast.walk(loggers):
        if isinstance(node, ast.ClassDef) and node.name == "PrometheusStatLogger":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    labels = _labels(_assignments(item).get("labelnames"), {})
                    assert labels, "PrometheusStatLogger.__init__ sets no literal labelnames"
                    return labels
    raise AssertionError("vllm/v1/metrics/loggers.py has no PrometheusStatLogger.__init__")
