"""Build CUTLASS's Hopper mixed-input GEMM (FP8 weight x BF16 activation) as one C library.

    python3 research/mixed_input/build.py --out build/mixed_input \\
        --cutlass-wheel .cache/gpu/nvidia_cutlass-4.2.0.0-py3-none-any.whl

Needs nvcc (CUDA 12.3 or newer) and the headers of the ``nvidia-cutlass`` wheel (``pip download
nvidia-cutlass --no-deps``); neither torch nor network access. Each of ``VARIANTS`` compiles
``mixed_input_gemm.cu`` once, in parallel, into ``libmixed_input_gemm.so`` (git-ignored output),
whose C functions ``<variant>_run``, ``_workspace``, ``_prepare_weight`` and ``_status_string``
the ``mixed_input_gemm`` tool calls.
"""

from __future__ import annotations

import argparse
import os
import shutil
import site
import subprocess
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

SOURCE = Path(__file__).with_name("mixed_input_gemm.cu")
LIBRARY_NAME = "libmixed_input_gemm.so"
HEADERS_IN_WHEEL = "cutlass_library/source/"


class Variant(NamedTuple):
    tokens_tile: int
    scaled: bool
    shuffled: bool


VARIANTS = {
    "convert_128": Variant(128, scaled=False, shuffled=False),
    "convert_128_shuffled": Variant(128, scaled=False, shuffled=True),
    "convert_256_shuffled": Variant(256, scaled=False, shuffled=True),
    "scaled_128_shuffled": Variant(128, scaled=True, shuffled=True),
    "scaled_256_shuffled": Variant(256, scaled=True, shuffled=True),
}


def cutlass_headers(wheel: Path, dest: Path) -> list[Path]:
    """Extract the wheel's C++ sources; return the two include folders the kernel uses."""
    if not wheel.is_file():
        raise SystemExit(f"{wheel}: no such file (pip download nvidia-cutlass --no-deps)")
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.startswith(HEADERS_IN_WHEEL)]
        if not members:
            raise SystemExit(f"{wheel}: no CUTLASS headers inside (not an nvidia-cutlass wheel?)")
        archive.extractall(dest, members=members)
    root = dest / HEADERS_IN_WHEEL
    return [root / "include", root / "tools" / "util" / "include"]


def folders_with(header: str, given: list[Path]) -> list[Path]:
    """No folder when one ``given`` or the CUDA toolkit's own has ``header``; else the first
    nvidia wheel's include folder that does."""
    if any((folder / header).exists() for folder in given):
        return []
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise SystemExit("nvcc not found on PATH")
    toolkit = Path(nvcc).resolve().parent.parent / "include"
    if (toolkit / header).exists():
        return []  # nvcc searches its own include folder
    found = sorted(
        {
            p.parent
            for root in site.getsitepackages()
            for p in Path(root).glob(f"nvidia/**/{header}")
        }
    )
    if not found:
        raise SystemExit(f"{header} not found in the CUDA toolkit nor in nvidia wheels")
    return found[:1]


def compile_variant(
    name: str, variant: Variant, includes: list[Path], arch: str, out: Path
) -> Path:
    obj = out / f"{name}.o"
    cmd = [
        "nvcc",
        "-std=c++17",
        "-O3",
        "-DNDEBUG",
        "-Xcompiler",
        "-fPIC",
        f"-gencode=arch=compute_{arch},code=sm_{arch}",
        "--expt-relaxed-constexpr",
        f"-DMIXED_TOKENS_TILE={variant.tokens_tile}",
        f"-DMIXED_SCALED={int(variant.scaled)}",
        f"-DMIXED_SHUFFLED={int(variant.shuffled)}",
        f"-DMIXED_NAME={name}",
        *(f"-I{folder}" for folder in includes),
        "-c",
        str(SOURCE),
        "-o",
        str(obj),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"nvcc failed on {name}:\n{result.stderr[-4000:]}")
    print(f"  compiled {name}", flush=True)
    return obj


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cutlass-wheel", type=Path, required=True, help="nvidia_cutlass-*.whl")
    parser.add_argument("--out", type=Path, required=True, help="build folder (git-ignored)")
    parser.add_argument(
        "--arch", default="90a", help="the GPU's arch with its suffix (sm_90a: 90a)"
    )
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    parser.add_argument(
        "--include",
        type=Path,
        action="append",
        default=[],
        help="another include folder (cuRAND's, if neither the toolkit nor a wheel has it)",
    )
    args = parser.parse_args(argv)
    if not args.arch.endswith("a"):
        parser.error("--arch needs the arch-specific suffix 'a' (Hopper's GMMA): e.g. 90a")

    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    # CUTLASS's reordering helper pulls in its tensor-fill header, which includes cuRAND's.
    cutlass = cutlass_headers(args.cutlass_wheel, args.out / "cutlass")
    curand = folders_with("curand_kernel.h", args.include)
    includes = [*cutlass, *args.include, *curand]
    print(f"compiling {len(VARIANTS)} variants with {args.jobs} jobs", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        jobs = [
            pool.submit(compile_variant, name, variant, includes, args.arch, args.out)
            for name, variant in VARIANTS.items()
        ]
        objects = [job.result() for job in jobs]
    library = args.out / LIBRARY_NAME
    subprocess.run(["nvcc", "-shared", *map(str, objects), "-o", str(library)], check=True)
    print(f"built {library} in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
