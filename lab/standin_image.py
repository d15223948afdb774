"""Build the lab's stand-in serving image (lab/standin) on top of the lab base image.

The lab has no registry, so the image is pinned by its local image ID: the ID of what was built
is written to .cache/lab/standin-image.id, and the lab inventory pins the service to it.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

try:
    from lab import labctl
except ImportError:  # run through lab/labctl.py, which puts lab/ itself on the path
    import labctl  # type: ignore[no-redef]
try:
    from lab import standin_context, vllm_cli_spec
except ImportError:  # as for labctl
    import standin_context  # type: ignore[no-redef]
    import vllm_cli_spec  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
CONTEXT = standin_context.STANDIN
REPOSITORY = "dualspark-lab/vllm-standin"
ID_FILE = REPO / ".cache/lab/standin-image.id"
# The real `vllm serve` option table the stand-in parses with: made from the pinned vLLM by
# lab/vllm_cli_spec.py under .cache, and put beside the stand-in's parser in the image.
SPEC = REPO / ".cache/lab/vllm-serve-cli.json"
SPEC_IN_CONTEXT = "vllm_standin/serve_cli_spec.json"
# Caches tools write into the context (mypy, ruff, pytest): no part of the image or its recipe.
CACHES = frozenset({"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"})


def _context() -> Path:
    """CONTEXT plus site/, lab_vllm/ and the option table."""
    staged = standin_context.prepare(CONTEXT)
    shutil.copyfile(SPEC, staged / SPEC_IN_CONTEXT)
    return staged


def recipe_digest() -> str:
    """Changes whenever the build context or the base image changes."""
    if not SPEC.is_file():
        raise SystemExit(f"{SPEC} is missing: run .venv/bin/python lab/vllm_cli_spec.py ensure")
    digest = hashlib.sha256()
    # Named on its own, whatever the loop below comes to skip: a new spec is a new image.
    digest.update(b"spec\0" + hashlib.sha256(SPEC.read_bytes()).digest())
    digest.update((labctl.current_image_digest() or "").encode())
    for path in sorted(CONTEXT.rglob("*")):
        if path.is_file() and not CACHES & set(path.relative_to(CONTEXT).parts):
            digest.update(str(path.relative_to(CONTEXT)).encode() + b"\0" + path.read_bytes())
    # torch, triton and the Marlin reference the context adds: by their lines, not their 2 GB.
    for line in standin_context.recipe_lines():
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()[:16]


def build() -> str:
    """Build if the recipe changed; return the image ID and record it in ID_FILE."""
    labctl.build_image(rebuild=False)
    if not SPEC.is_file():
        vllm_cli_spec.write_spec()
    tag = f"{REPOSITORY}:{recipe_digest()}"
    found = labctl.docker("image", "inspect", "--format", "{{.Id}}", tag, check=False)
    if found.returncode == 0:
        image_id = found.stdout.strip()
        labctl.log(f"image {tag} is up to date")
    else:
        labctl.log(f"building {tag}")
        labctl.docker(
            "build",
            "--quiet",
            "--build-arg",
            f"BASE={labctl.IMAGE}",
            "-t",
            tag,
            "--label",
            f"{labctl.LABEL}.standin=1",
            str(_context()),
        )
        image_id = labctl.docker("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()
        labctl.log(f"built {tag} ({image_id})")
    labctl.docker("tag", image_id, f"{REPOSITORY}:latest")
    ID_FILE.parent.mkdir(parents=True, exist_ok=True)
    # Replace, never rewrite in place: a scenario reading the pin meanwhile sees old or new.
    partial = ID_FILE.with_name(ID_FILE.name + ".partial")
    partial.write_text(image_id + "\n", encoding="utf-8")
    partial.replace(ID_FILE)
    return image_id
