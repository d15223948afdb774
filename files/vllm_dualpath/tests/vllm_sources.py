"""Where the contract tests find the real vLLM sources, and how they say so when absent."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from fetch_vllm_sdists import DEFAULT_DEST, EXTRACTED_MARKER, source_dir
from vllm_dualpath.plugin import TESTED_VLLM_VERSIONS

ALLOW_MISSING = "DUALPATH_ALLOW_MISSING_SDISTS"
SDIST_DIR = "DUALPATH_VLLM_SDIST_DIR"
VERSIONS = TESTED_VLLM_VERSIONS


def sources(version: str) -> Path:
    """The unpacked vllm-VERSION tree; fails the test (skips only if allowed) when missing."""
    dest = Path(os.environ.get(SDIST_DIR, DEFAULT_DEST))
    root = source_dir(dest, version)
    if (root / EXTRACTED_MARKER).is_file():
        return root
    message = (
        f"vLLM {version} sources are not at {root}. Fetch them with "
        f"`python files/vllm_dualpath/tests/fetch_vllm_sdists.py` (from the repository root)"
    )
    if os.environ.get(ALLOW_MISSING) == "1":
        pytest.skip(f"{message}; skipped because {ALLOW_MISSING}=1")
    pytest.fail(message, pytrace=False)


def module_path(root: Path, module: str) -> Path:
    return root / (module.replace(".", "/") + ".py")


def parse(root: Path, module: str) -> ast.Module:
    path = module_path(root, module)
    assert path.is_file(), f"{module} is missing from the sources ({path})"
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def top_level(tree: ast.Module, name: str) -> ast.AST:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return node
    raise AssertionError(f"{name} is not defined at the top level")


def method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{cls.name}.{name} is not defined")
