"""The dedicated venv that holds the real vLLM, for its `vllm serve` command-line parser only.

    python lab/vllm_cli_venv.py      # make it if missing or stale, then print its python

vLLM installs from its sdist as pure Python (VLLM_TARGET_DEVICE=empty) on the local CPU torch,
installed first so pip never resolves another; requirements/vllm-cli/constraints.txt pins the
rest. It lives under .cache/, apart from .venv, so vLLM's dependencies stay out of the project's
toolchain; a changed pin, sdist or Python remakes it. Failures raise VenvError with the install
log's tail: callers report it and stop, never skip.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VLLM_VERSION = "0.34.0"  # the version whose parser the stand-in copies (newest tested)
TORCH = "torch==2.13.0"
ROOT = REPO / ".cache/vllm-cli"
VENV = ROOT / f"venv-{VLLM_VERSION}"
STAMP = VENV / ".dualspark-stamp"
LOG = ROOT / f"install-{VLLM_VERSION}.log"
CONSTRAINTS = REPO / "requirements/vllm-cli/constraints.txt"
SDIST_DIR = REPO / ".cache/vllm-sdist"
FETCH_SDISTS = REPO / "files/vllm_dualpath/tests/fetch_vllm_sdists.py"
# What vLLM's setup.py needs with --no-build-isolation (its pyproject's build-system, less
# cmake and the CUDA torch it names; `empty` builds nothing).
BUILD_DEPS = ("numpy", "setuptools", "setuptools-scm", "setuptools-rust", "wheel", "packaging")


class VenvError(RuntimeError):
    """The parser venv could not be made; the message says why."""


def python() -> Path:
    return VENV / "bin/python"


def sdist() -> Path:
    return SDIST_DIR / f"vllm-{VLLM_VERSION}.tar.gz"


def wanted_stamp() -> str:
    digest = hashlib.sha256()
    digest.update(f"{VLLM_VERSION}\0{TORCH}\0{sys.version}\0".encode())
    digest.update(CONSTRAINTS.read_bytes())
    digest.update(hashlib.sha256(sdist().read_bytes()).digest() if sdist().is_file() else b"")
    return digest.hexdigest()


def is_current() -> bool:
    return python().is_file() and STAMP.is_file() and STAMP.read_text().strip() == wanted_stamp()


def _run(command: list[str], env: dict[str, str] | None = None) -> None:
    started = time.monotonic()
    with LOG.open("a", encoding="utf-8") as log:
        log.write("+ " + " ".join(command) + "\n")
        log.flush()
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
        log.write(f"= {result.returncode} after {time.monotonic() - started:.0f} s\n")
    if result.returncode != 0:
        tail = "\n".join(LOG.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
        raise VenvError(f"failed ({result.returncode}): {' '.join(command)}\n{tail}\n(log: {LOG})")


def _make(say: Callable[[str], None]) -> None:
    if not sdist().is_file():
        say(f"fetching the vLLM {VLLM_VERSION} sdist")
        _run([sys.executable, str(FETCH_SDISTS), VLLM_VERSION])
    shutil.rmtree(VENV, ignore_errors=True)
    # --no-compile: byte-compiling every package is slow; the import check below compiles the
    # part the parser uses.
    pip = [str(python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    pip.append("--no-compile")
    _run([sys.executable, "-m", "venv", str(VENV)])
    _run([*pip, TORCH])  # first and alone: the local CPU build, before anything can ask for torch
    _run([*pip, "--constraint", str(CONSTRAINTS), *BUILD_DEPS])
    env = {**os.environ, "VLLM_TARGET_DEVICE": "empty", "VLLM_VERSION_OVERRIDE": VLLM_VERSION}
    _run([*pip, "--no-build-isolation", "--constraint", str(CONSTRAINTS), str(sdist())], env)
    _run([str(python()), "-c", "import vllm.entrypoints.cli.serve"])


def ensure(say: Callable[[str], None] = print) -> Path:
    """The venv's python, after making the venv if it is missing or stale."""
    ROOT.mkdir(parents=True, exist_ok=True)
    with (ROOT / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # bin/setup and a test run may both get here
        if is_current():
            return python()
        LOG.write_text("", encoding="utf-8")
        say(f"making the vLLM {VLLM_VERSION} parser venv at {VENV}")
        started = time.monotonic()
        _make(say)
        STAMP.write_text(wanted_stamp() + "\n", encoding="utf-8")
        say(f"parser venv ready in {time.monotonic() - started:.0f} s")
    return python()


def main() -> int:
    try:
        print(ensure(lambda line: print(line, file=sys.stderr)))
    except VenvError as exc:
        print(f"vllm_cli_venv: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
