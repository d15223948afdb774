"""The stand-in image's context: pinned site requirements, staged lab vllm, linked site."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lab import standin_context
from tests.helpers import REPO


def requirements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    path = tmp_path / "overlay.txt"
    path.write_text(text, encoding="utf-8")
    monkeypatch.setattr(standin_context, "OVERLAY_REQUIREMENTS", path)


def test_the_site_takes_the_overlay_pins_and_torchs_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requirements(tmp_path, monkeypatch, "# torch first\ntorch==2.13.0\ntriton==3.9.0  # pin\n")
    site = standin_context.site_requirements()
    assert site[:2] == ["torch==2.13.0", "triton==3.9.0"]
    assert {"sympy==1.14.0", "jinja2==3.1.6", "filelock==4.3.2"} <= set(site)
    before = standin_context.recipe_lines()
    requirements(tmp_path, monkeypatch, "torch==2.13.0\ntriton==3.8.0\n")
    assert standin_context.recipe_lines() != before


def test_the_repositorys_pins_are_the_ones_the_site_uses() -> None:
    pinned = (REPO / "requirements/overlay.txt").read_text(encoding="utf-8")
    for line in standin_context.overlay_requirements():
        assert line in pinned
    assert standin_context.TORCH in standin_context.site_requirements()


def test_another_torch_pin_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requirements(tmp_path, monkeypatch, "torch==2.14.1\ntriton==3.9.0\n")
    with pytest.raises(standin_context.ContextError, match=r"torch==2\.13\.0"):
        standin_context.site_requirements()


def test_prepare_stages_lab_vllm_and_links_the_site(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch/__init__.py").write_text("", encoding="utf-8")
    (site / standin_context.COMPLETE).write_text("", encoding="utf-8")
    monkeypatch.setattr(standin_context, "site_dir", lambda: site)
    monkeypatch.setattr(standin_context, "STAGED", tmp_path / "context")
    (tmp_path / "context/stale").mkdir(parents=True)
    source = tmp_path / "standin"
    shutil.copytree(standin_context.STANDIN, source)
    for leftover in (".mypy_cache/3.11/x.json", "vllm_standin/__pycache__/model.cpython-311.pyc"):
        (source / leftover).parent.mkdir(parents=True, exist_ok=True)
        (source / leftover).write_text("", encoding="utf-8")

    staged = standin_context.prepare(source)

    assert not (staged / "stale").exists()
    assert (staged / "Dockerfile").is_file() and (staged / "vllm_standin/model.py").is_file()
    lab = staged / standin_context.LAB_VLLM
    assert (lab / "vllm/__init__.py").is_file()
    reference = lab / "marlin_standin.py"
    assert reference.read_bytes() == standin_context.MARLIN_REFERENCE.read_bytes()
    assert (staged / "site/torch/__init__.py").stat().st_ino == (
        (site / "torch/__init__.py").stat().st_ino
    )
    assert not (staged / "site" / standin_context.COMPLETE).exists()
    assert (site / standin_context.COMPLETE).exists()
    assert not list(staged.rglob("__pycache__")) and not list(staged.rglob(".mypy_cache"))
