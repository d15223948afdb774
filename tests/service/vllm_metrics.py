"""vLLM's own Prometheus metrics, read from the pinned vLLM in the parser venv.

What the stand-in's /metrics is held to, from the venv of lab/vllm_cli_venv.py: each metric
PrometheusStatLogger declares (vllm/v1/metrics/loggers.py, read with ast: nothing of vLLM is
imported), its type, help text, label names and bucket family; the bucket defaults of
vllm/v1/metrics/buckets.py; the paths vLLM's API key guards
(vllm/entrypoints/serve/middleware/authenticate.py). An exposition is parsed by the
prometheus_client that vLLM itself runs with, in the same venv.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lab import vllm_cli_venv

KINDS = {"_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}
PARSE = """
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families = text_string_to_metric_families(sys.stdin.read())
print(json.dumps([
    {"name": f.name, "type": f.type, "help": f.documentation,
     "samples": [[s.name, s.labels, s.value] for s in f.samples]}
    for f in families
]))
"""


@dataclass(frozen=True)
class Declared:
    """A metric as PrometheusStatLogger declares it."""

    kind: str
    help: str
    labels: tuple[str, ...]
    buckets: str  # the bucket family passed to histogram_buckets, "" for other kinds


def source() -> Path:
    """The pinned vLLM's package directory (the venv is made first if needed); fails, never
    skips, when it cannot be had."""
    try:
        python = vllm_cli_venv.ensure()
    except vllm_cli_venv.VenvError as exc:
        pytest.fail(f"the pinned vLLM could not be installed: {exc}")
    (package,) = python.parent.parent.glob("lib/python*/site-packages/vllm")
    return package


def declared(vllm: Path) -> dict[str, Declared]:
    """Every metric PrometheusStatLogger declares with a literal name, by name."""
    tree = ast.parse((vllm / "v1/metrics/loggers.py").read_text(encoding="utf-8"))
    (logger,) = (
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "PrometheusStatLogger"
    )
    base: list[str] = []
    families: dict[str, str] = {}  # a buckets variable -> its histogram_buckets family
    for node in ast.walk(logger):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
            if target == "labelnames" and isinstance(value, ast.List):
                base = [ast.literal_eval(item) for item in value.elts]
            elif (
                isinstance(value, ast.Call) and getattr(value.func, "id", "") == "histogram_buckets"
            ):
                families[target] = ast.literal_eval(value.args[0])
    found: dict[str, Declared] = {}
    for node in ast.walk(logger):
        kind = KINDS.get(getattr(getattr(node, "func", None), "attr", ""))
        if not isinstance(node, ast.Call) or kind is None:
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        if not isinstance(keywords.get("name"), ast.Constant):
            continue
        buckets = keywords.get("buckets")
        found[ast.literal_eval(keywords["name"])] = Declared(
            kind=kind,
            help=ast.literal_eval(keywords["documentation"]),
            labels=_labels(keywords["labelnames"], base),
            buckets=families[buckets.id] if isinstance(buckets, ast.Name) else "",
        )
    return found


def _labels(node: ast.expr, base: list[str]) -> tuple[str, ...]:
    if isinstance(node, ast.Name) and node.id == "labelnames":
        return tuple(base)
    if isinstance(node, ast.BinOp):  # labelnames + ["reason"]
        return _labels(node.left, base) + _labels(node.right, base)
    if isinstance(node, ast.List):  # a label given by an expression keeps its source text
        return tuple(
            item.value if isinstance(item, ast.Constant) else ast.unparse(item)
            for item in node.elts
        )
    return (ast.unparse(node),)


def bucket_defaults(vllm: Path, family: str, max_model_len: int) -> list[float]:
    """buckets.py's histogram_buckets(family) (it imports nothing of vLLM)."""
    spec = importlib.util.spec_from_file_location("vllm_buckets", vllm / "v1/metrics/buckets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    buckets: list[float] = module.histogram_buckets(family, max_model_len=max_model_len)
    return buckets


def guarded_prefix(vllm: Path) -> tuple[str, ...]:
    """The path prefixes vLLM's AuthenticationMiddleware asks the API key for."""
    path = vllm / "entrypoints/serve/middleware/authenticate.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "GUARDED_PREFIX":
            prefix: tuple[str, ...] = ast.literal_eval(node.value)
            return prefix
    raise AssertionError(f"no GUARDED_PREFIX in {path}")


def parse(text: str) -> list[dict[str, Any]]:
    """The exposition's families as vLLM's prometheus_client parses them (raises if it cannot)."""
    result = subprocess.run(
        [str(vllm_cli_venv.ensure()), "-c", PARSE],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"prometheus_client cannot parse it:\n{result.stderr}"
    families: list[dict[str, Any]] = json.loads(result.stdout)
    return families
