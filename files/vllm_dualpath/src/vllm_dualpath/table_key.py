"""What a calibration table was measured for, and the node-side check that finds a table to reuse.

A table holds for one GPU model, one driver, one version of the overlay's kernels and one set of
layer shapes; any change of those measures again. Reading the key needs neither torch nor CUDA, so
the check runs on the node with the host's Python before any container starts:

    python3 -m vllm_dualpath.table_key --model /models/ckpt --tensor-parallel-size 2 \\
        --store /opt/dualspark/overlay/calibration/tables \\
        --link /opt/dualspark/overlay/calibration/RELEASE.json

prints one JSON line: ``state`` is ``reused`` (the link already names the matching table),
``linked`` (it does now) or ``missing`` (nothing measured matches: calibrate), with the key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

from vllm_dualpath import model_shapes

# The modules whose code runs in the timed paths: a change to any of them measures again.
KERNEL_MODULES = ("op.py", "unpack.py", "layout.py", "scratch.py", "ahead.py")
DRIVER_VERSION_FILE = Path("/proc/driver/nvidia/version")
_DRIVER_LINE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")


@dataclass(frozen=True)
class TableKey:
    gpu: str
    driver: str
    kernels: str
    shapes: tuple[tuple[int, int], ...]

    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def as_json(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "driver": self.driver,
            "kernels": self.kernels,
            "shapes": [list(shape) for shape in self.shapes],
        }


def kernels_digest() -> str:
    digest = hashlib.sha256()
    package = resources.files("vllm_dualpath")
    for name in KERNEL_MODULES:
        digest.update(name.encode() + b"\0" + package.joinpath(name).read_bytes())
    return digest.hexdigest()[:16]


def _nvidia_smi(field: str) -> str:
    program = shutil.which("nvidia-smi")
    if program is None:
        return ""
    try:
        output = subprocess.run(
            [program, f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = output.strip().splitlines()
    return lines[0].strip() if lines else ""


def read_driver(version_file: Path = DRIVER_VERSION_FILE) -> str:
    """The NVIDIA driver version from procfs (no CUDA), else from nvidia-smi; '' when neither."""
    try:
        match = _DRIVER_LINE.search(version_file.read_text(encoding="utf-8"))
    except OSError:
        match = None
    return match.group(1) if match else _nvidia_smi("driver_version")


def read_gpu_name() -> str:
    return _nvidia_smi("name")


def shape_pairs(shapes: Sequence[model_shapes.Shape]) -> tuple[tuple[int, int], ...]:
    return tuple(sorted({(shape.n, shape.k) for shape in shapes}))


def node_key(
    shapes: Sequence[model_shapes.Shape], gpu: str | None = None, driver: str | None = None
) -> TableKey:
    """This node's key for ``shapes``; the GPU name and driver are read here unless given."""
    return TableKey(
        gpu=gpu if gpu is not None else read_gpu_name(),
        driver=driver if driver is not None else read_driver(),
        kernels=kernels_digest(),
        shapes=shape_pairs(shapes),
    )


def stored_table(store: Path, key: TableKey) -> Path:
    """Where a table measured for ``key`` is kept."""
    return store / f"{key.digest()}.json"


def key_mismatches(measured: TableKey, here: TableKey) -> list[str]:
    """What differs between the key a table was measured for and this node's; '' fields are
    unknown here and not compared."""
    problems = []
    for field in ("gpu", "driver", "kernels"):
        theirs, ours = getattr(measured, field), getattr(here, field)
        if ours and theirs != ours:
            problems.append(f"{field} {theirs!r} (here {ours!r})")
    missing = set(here.shapes) - set(measured.shapes)
    if here.shapes and missing:
        listed = ", ".join(f"{n}x{k}" for n, k in sorted(missing))
        problems.append(f"shapes without a measurement: {listed}")
    return problems


def point_link(link: Path, target: Path) -> bool:
    """Make ``link`` a relative symlink to ``target``, atomically; whether it changed."""
    relative = os.path.relpath(target, link.parent)
    if link.is_symlink() and str(link.readlink()) == relative:
        return False
    temporary = link.with_name(f".{link.name}.tmp")
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(relative)
    temporary.replace(link)
    return True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m vllm_dualpath.table_key", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", type=Path, required=True, help="checkpoint directory")
    parser.add_argument("--tensor-parallel-size", type=int, required=True)
    parser.add_argument("--store", type=Path, required=True, help="directory of measured tables")
    parser.add_argument("--link", type=Path, required=True, help="the table path the service reads")
    parser.add_argument("--gpu", help="GPU name (default: nvidia-smi's)")
    parser.add_argument("--driver", help="driver version (default: this node's)")
    args = parser.parse_args(argv)
    try:
        shapes = model_shapes.checkpoint_shapes(args.model, args.tensor_parallel_size)
    except model_shapes.ModelConfigError as error:
        parser.exit(2, f"table_key: {error}\n")
    key = node_key(shapes, args.gpu, args.driver)
    table = stored_table(args.store, key)
    state = "missing"
    if table.is_file():
        state = "linked" if point_link(args.link, table) else "reused"
    print(json.dumps({"state": state, "digest": key.digest(), "key": key.as_json()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
