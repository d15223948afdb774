"""The stand-in image's build context: lab/standin plus what the stand-in's model needs.

The model runs the overlay's real op on the CPU, so the image needs torch (the pinned CPU build),
triton and their runtime dependencies, which the bookworm image cannot fetch (no pip, no mirror).
They are installed here with ``pip install --target`` under .cache/lab/, once per set of
requirement lines, and carried as ``site/``, beside a build-time copy of the overlay tests'
``marlin_standin.py``, which the lab vllm tree imports.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

REPO: Final = Path(__file__).resolve().parent.parent
# The stand-in server and its Dockerfile: the build context before prepare() adds to it.
STANDIN: Final = REPO / "lab/standin"
OVERLAY_REQUIREMENTS: Final = REPO / "requirements/overlay.txt"
# Copied from the overlay's tests into the lab vllm tree of the context.
MARLIN_REFERENCE: Final = REPO / "files/vllm_dualpath/tests/marlin_standin.py"
LAB_VLLM: Final = "lab_vllm"
SITE: Final = "site"
CACHE: Final = REPO / ".cache/lab"
STAGED: Final = CACHE / "standin-context"
# torch's Requires-Dist without extras (and sympy's mpmath, jinja2's markupsafe), pinned to what
# the overlay's tests run with in .venv; installed with --no-deps so nothing else comes along.
TORCH_RUNTIME: Final = (
    "filelock==4.3.2",
    "typing-extensions==4.16.0",
    "setuptools==84.2.1",
    "sympy==1.14.0",
    "mpmath==1.3.0",
    "networkx==3.6.1",
    "jinja2==3.1.6",
    "markupsafe==3.0.4",
    "fsspec==2026.9.0",
)
# Wheels for the image's python3 (bookworm: CPython 3.11, glibc 2.36), whatever runs this.
PIP_TARGET: Final = (
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
    "--platform",
    "manylinux_2_28_x86_64",
    "--platform",
    "manylinux_2_17_x86_64",
)
TORCH: Final = "torch==2.13.0"
COMPLETE: Final = ".complete"
# Local leftovers (bytecode, tool caches) stay out of the image.
IGNORED_NAMES: Final = ("__pycache__", "*.pyc", ".*_cache")
IGNORED: Final = shutil.ignore_patterns(*IGNORED_NAMES)


class ContextError(RuntimeError):
    """The site directory could not be made; the message says why."""


def overlay_requirements() -> list[str]:
    """requirements/overlay.txt's requirement lines (torch, triton, numpy), comments dropped."""
    lines = OVERLAY_REQUIREMENTS.read_text(encoding="utf-8").splitlines()
    return [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]


def site_requirements() -> list[str]:
    requirements = overlay_requirements()
    if TORCH not in requirements:
        # The CPU build is the only torch pip finds on local disk; another pin would fetch CUDA.
        raise ContextError(f"{OVERLAY_REQUIREMENTS} no longer pins {TORCH}; update {__name__}")
    return [*requirements, *TORCH_RUNTIME]


def recipe_lines() -> list[str]:
    """What the image recipe digest takes from here: the site's requirements and pip target
    (not the 1.7 GB it installs), and the Marlin reference copied into the context."""
    reference = hashlib.sha256(MARLIN_REFERENCE.read_bytes()).hexdigest()
    return [*site_requirements(), " ".join(PIP_TARGET), f"marlin_standin.py {reference}"]


def site_dir() -> Path:
    """The installed site for the current requirement lines, built on first use."""
    requirements = site_requirements()
    key = hashlib.sha256("\n".join([*requirements, *PIP_TARGET]).encode()).hexdigest()[:16]
    site = CACHE / f"standin-site-{key}"
    if (site / COMPLETE).is_file():
        return site
    if site.exists():
        shutil.rmtree(site)  # an interrupted install
    print(f"[lab] installing {' '.join(requirements)} into {site} (once)", flush=True)
    started = time.monotonic()
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
    command += ["--only-binary=:all:", "--target", str(site), *PIP_TARGET, *requirements]
    result = subprocess.run(command, text=True, capture_output=True, check=False)
    if result.returncode != 0:
        raise ContextError(f"pip install --target {site} failed:\n{result.stderr.strip()}")
    version = (site / "torch/version.py").read_text(encoding="utf-8")
    if "__version__ = '2.13.0+cpu'" not in version:
        # --no-deps and the exact pin leave no room for it, but a CUDA torch would be 4 GB more.
        raise ContextError(f"pip installed a torch other than 2.13.0+cpu into {site}")
    (site / COMPLETE).write_text("\n".join(requirements) + "\n", encoding="utf-8")
    print(f"[lab] site ready in {time.monotonic() - started:.0f} s", flush=True)
    return site


def stage_lab_vllm(destination: Path) -> Path:
    """lab/standin/lab_vllm with the Marlin reference beside its vllm package."""
    shutil.copytree(STANDIN / LAB_VLLM, destination, ignore=IGNORED)
    shutil.copy2(MARLIN_REFERENCE, destination / MARLIN_REFERENCE.name)
    return destination


def prepare(context: Path) -> Path:
    """A fresh build context: ``context`` as it is, lab_vllm staged, the site linked in."""
    site = site_dir()
    if STAGED.exists():
        shutil.rmtree(STAGED)
    shutil.copytree(context, STAGED, ignore=shutil.ignore_patterns(*IGNORED_NAMES, LAB_VLLM))
    stage_lab_vllm(STAGED / LAB_VLLM)
    # Hard links: the context costs no copy of the site (same file system as .cache).
    shutil.copytree(site, STAGED / SITE, copy_function=os.link)
    (STAGED / SITE / COMPLETE).unlink()
    return STAGED
