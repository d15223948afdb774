"""Fetch the vLLM source distributions the contract tests read, without building anything.

    python files/vllm_dualpath/tests/fetch_vllm_sdists.py [--dest DIR] [VERSION ...]

Defaults: every version in vllm_dualpath.plugin.TESTED_VLLM_VERSIONS, into <repo>/.cache/vllm-sdist
(git-ignored). pip must prepare the sdist's metadata, which runs vLLM's setup.py: that needs
setuptools-rust and setuptools-scm, installed here into DEST/build-deps (never into the venv), and
VLLM_TARGET_DEVICE=empty so nothing is compiled. Each sdist's Python tree is then unpacked to
DEST/src/vllm-VERSION. Exits non-zero, saying why, if anything could not be fetched.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tarfile
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_ROOT.parents[1]
DEFAULT_DEST = REPO_ROOT / ".cache" / "vllm-sdist"
BUILD_REQUIREMENTS = ("setuptools-rust==1.13.0", "setuptools-scm==10.3.4")
EXTRACTED_MARKER = ".extracted"


def tested_versions() -> tuple[str, ...]:
    """TESTED_VLLM_VERSIONS, read from the plugin's source: importing it would need torch."""
    tree = ast.parse((PACKAGE_ROOT / "src/vllm_dualpath/plugin.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "TESTED_VLLM_VERSIONS"
            and node.value is not None
        ):
            return tuple(ast.literal_eval(node.value))
    raise SystemExit("TESTED_VLLM_VERSIONS is not in vllm_dualpath/plugin.py")


def source_dir(dest: Path, version: str) -> Path:
    return dest / "src" / f"vllm-{version}"


def _run(command: list[str], env: dict[str, str] | None = None) -> None:
    print("+", " ".join(command), flush=True)
    result = subprocess.run(command, env=env, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"fetch_vllm_sdists: command failed ({result.returncode}): {' '.join(command)}"
        )


def ensure_build_deps(dest: Path) -> Path:
    target = dest / "build-deps"
    if not (target / "setuptools_rust").is_dir() or not (target / "setuptools_scm").is_dir():
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--target",
                str(target),
                *BUILD_REQUIREMENTS,
            ]
        )
    return target


def download(dest: Path, version: str, build_deps: Path) -> Path:
    archive = dest / f"vllm-{version}.tar.gz"
    if archive.is_file():
        return archive
    env = dict(os.environ)
    env.update(
        VLLM_VERSION_OVERRIDE=version,
        VLLM_TARGET_DEVICE="empty",
        PYTHONPATH=os.pathsep.join(filter(None, [str(build_deps), env.get("PYTHONPATH")])),
    )
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--no-build-isolation",
            f"vllm=={version}",
            "-d",
            str(dest),
        ],
        env,
    )
    if not archive.is_file():
        raise SystemExit(f"fetch_vllm_sdists: pip finished but {archive} is missing")
    return archive


def extract_python_tree(archive: Path, target: Path, version: str) -> None:
    """Unpack vllm-VERSION/vllm/**.py and pyproject.toml (the parts the tests read)."""
    if (target / EXTRACTED_MARKER).is_file():
        return
    prefix = f"vllm-{version}/"
    with tarfile.open(archive) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.isfile()
            and m.name.startswith(prefix)
            and (
                (m.name.startswith(prefix + "vllm/") and m.name.endswith(".py"))
                or m.name == prefix + "pyproject.toml"
            )
        ]
        if not any(m.name == prefix + "vllm/__init__.py" for m in members):
            raise SystemExit(f"fetch_vllm_sdists: {archive} has no {prefix}vllm/__init__.py")
        tar.extractall(target.parent, members=members, filter="data")
    (target / EXTRACTED_MARKER).write_text(archive.name + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("versions", nargs="*", help="vLLM versions (default: the tested ones)")
    parser.add_argument("--dest", type=Path, default=DEFAULT_DEST)
    arguments = parser.parse_args(argv)
    versions = arguments.versions or list(tested_versions())
    dest: Path = arguments.dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    build_deps = None
    for version in versions:
        target = source_dir(dest, version)
        if (target / EXTRACTED_MARKER).is_file():
            print(f"vllm {version}: already at {target}")
            continue
        archive = dest / f"vllm-{version}.tar.gz"
        if not archive.is_file():
            build_deps = build_deps or ensure_build_deps(dest)
            archive = download(dest, version, build_deps)
        extract_python_tree(archive, target, version)
        print(f"vllm {version}: sources at {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
