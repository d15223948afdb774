"""Build the lab's stand-in serving image (tests/standin) on top of the lab base image.

The lab has no registry, so the image is pinned by its local image ID: the ID of what was built
is written to .cache/lab/standin-image.id, and the lab inventory pins the service to it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

try:
    from lab import labctl
except ImportError:  # run through lab/labctl.py, which puts lab/ itself on the path
    import labctl  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parent.parent
CONTEXT = REPO / "tests/standin"
REPOSITORY = "dualspark-lab/vllm-standin"
ID_FILE = REPO / ".cache/lab/standin-image.id"


def recipe_digest() -> str:
    """Changes whenever the build context or the base image changes."""
    digest = hashlib.sha256()
    digest.update((labctl.current_image_digest() or "").encode())
    for path in sorted(CONTEXT.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(CONTEXT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build() -> str:
    """Build if the recipe changed; return the image ID and record it in ID_FILE."""
    labctl.build_image(rebuild=False)
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
            str(CONTEXT),
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
