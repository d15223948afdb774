"""What the repository's tests share: where the repository is, how to run its tools and plays."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent


def run_tool(*args: str, cwd: Path = REPO, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    """Run a command from the repo root with the venv first on PATH; never raises on failure."""
    env = dict(os.environ, PATH=f"{REPO / '.venv/bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    env["NO_COLOR"] = "1"
    return subprocess.run(
        list(args), cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout, check=False
    )


def run_local_play(
    directory: Path, plays: list[dict[str, Any]], *env: str, args: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Write ``plays`` to directory/play.yml and run it on this machine (``env``: NAME=value
    settings for ansible-playbook, ``args``: more of its options); never raises on failure."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "play.yml").write_text(yaml.safe_dump(plays, sort_keys=False), encoding="utf-8")
    return run_tool(
        "env",
        *env,
        "ansible-playbook",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ansible_python_interpreter={{ ansible_playbook_python }}",
        *args,
        "play.yml",
        cwd=directory,
        timeout=300,
    )


def output_of(result: subprocess.CompletedProcess[str], lines: int = 200) -> str:
    text = (result.stdout or "") + (result.stderr or "")
    return "\n".join(text.splitlines()[-lines:])


def write_demo_plugin(root: Path) -> Path:
    """A small package with a vllm.general_plugins entry point, laid out like the overlay."""
    (root / "src/demo_plugin").mkdir(parents=True)
    (root / "src/demo_plugin/__init__.py").write_text("def register():\n    pass\n")
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "demo-plugin"\nversion = "2.0.1"\n'
        '[project.entry-points."vllm.general_plugins"]\ndemo = "demo_plugin:register"\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    return root
