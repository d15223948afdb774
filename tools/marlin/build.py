"""Build vLLM's FP8-weight x BF16-activation Marlin kernels as a standalone torch library.

Needs only torch and nvcc on the CUDA machine, neither vLLM nor network access: it takes the
vLLM source distribution from PyPI (fetched with `pip download` wherever PyPI can be reached),
extracts the Marlin sources, generates only the kernel instantiations the FP8 dense path uses
(BF16 activations and outputs, channel-wise and 128-group scales), compiles them in parallel and
links one shared library. Loading it with `torch.ops.load_library` registers
`torch.ops._C.marlin_gemm` and `torch.ops._C.gptq_marlin_repack`, the names vLLM itself uses.

    python3 tools/marlin/build.py --sdist .cache/sdist/vllm-0.33.0.tar.gz --out build/marlin

Nothing built here belongs in the repository: the output folder is git-ignored.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SCHEMA_SOURCE = Path(__file__).with_name("marlin_fp8_ops.cpp")
LIBRARY_NAME = "libvllm_marlin_fp8.so"

# The sdist members the two ops need: the Marlin folder, the scalar-type header and the
# stable-ABI helpers.
NEEDED_MEMBERS = (
    "csrc/quantization/marlin/",
    "csrc/core/",
    "csrc/torch_utils.h",
)

# Only the FP8 weight x BF16 activation family; vLLM's generator builds hundreds of others.
FP8_BF16_CONFIG = {
    "a_type": ["kBFloat16"],
    "b_type": "kFE4M3fn",
    "c_type": ["kBFloat16"],
    "group_blocks": [-1, 8],
}

INSTANTIATION = re.compile(r"^template __global__ void Marlin<.*\);$", re.MULTILINE)


def extract_sources(sdist: Path, dest: Path) -> Path:
    """Extract the needed members; return the csrc folder."""
    with tarfile.open(sdist) as archive:
        members = [
            m
            for m in archive.getmembers()
            if m.isfile() and any(m.name.split("/", 1)[-1].startswith(n) for n in NEEDED_MEMBERS)
        ]
        if not members:
            raise SystemExit(f"{sdist}: no Marlin sources found (not a vLLM sdist?)")
        archive.extractall(dest, members=members, filter="data")
    roots = {m.name.split("/", 1)[0] for m in members}
    (root,) = roots
    return dest / root / "csrc"


def generate_kernels(marlin_dir: Path, arch: str, out_dir: Path) -> list[Path]:
    """Run vLLM's generator with the FP8 x BF16 family only; one file per kernel."""
    script = marlin_dir / "generate_kernels.py"
    saved_argv = sys.argv
    sys.argv = [str(script), arch, str(out_dir)]
    try:
        spec = importlib.util.spec_from_file_location("marlin_generate_kernels", script)
        assert spec is not None and spec.loader is not None
        generator = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(generator)
    finally:
        sys.argv = saved_argv
    thread_configs = generator.THREAD_CONFIGS
    m_blocks = generator.THREAD_M_BLOCKS
    generator.QUANT_CONFIGS = [
        {**FP8_BF16_CONFIG, "thread_configs": thread_configs, "thread_m_blocks": m_blocks}
    ]
    generator.OUTPUT_DIR = str(out_dir)
    generator.remove_old_kernels()
    generator.generate_new_kernels()

    generated = sorted(out_dir.glob("sm80_kernel_*.cu"))
    if len(generated) != 1:
        raise SystemExit(f"expected one generated kernel file, got {generated}")
    text = generated[0].read_text()
    head, _, _ = text.partition("template __global__")
    instantiations = INSTANTIATION.findall(text)
    if not instantiations:
        raise SystemExit(f"{generated[0]}: no kernel instantiations found")
    generated[0].unlink()
    # One translation unit per instantiation, so they compile in parallel.
    files = []
    for index, line in enumerate(instantiations):
        path = out_dir / f"fp8_bf16_kernel_{index:02d}.cu"
        path.write_text(f"{head}{line}\n\n}}\n")
        files.append(path)
    return files


def torch_paths() -> tuple[list[str], list[str]]:
    from torch.utils.cpp_extension import include_paths, library_paths

    # nvcc adds the CUDA toolkit's own include and library folders itself.
    return include_paths(device_type="cpu"), library_paths(device_type="cpu")


def cublas_include_dirs() -> list[str]:
    """vLLM's torch_utils.h includes cublas_v2.h: take it from the toolkit or torch's wheels."""
    import site

    nvcc = shutil.which("nvcc")
    toolkit = Path(nvcc).resolve().parent.parent / "include" if nvcc else None
    if toolkit is not None and (toolkit / "cublas_v2.h").exists():
        return []
    found = {
        str(header.parent)
        for root in site.getsitepackages()
        for header in Path(root).glob("nvidia/**/include/cublas_v2.h")
    }
    if not found:
        raise SystemExit("cublas_v2.h not found in the CUDA toolkit nor in nvidia wheels")
    return sorted(found)


def compile_all(
    sources: list[Path], include_dirs: list[str], arch: str, build_dir: Path, jobs: int
) -> list[Path]:
    arch_code = arch.replace(".", "")
    flags = [
        "-std=c++17",
        "-O3",
        "-Xcompiler",
        "-fPIC",
        f"-gencode=arch=compute_{arch_code},code=sm_{arch_code}",
        "--expt-relaxed-constexpr",
        "--expt-extended-lambda",
        "-static-global-template-stub=false",
        "-DUSE_CUDA",
        "-DTORCH_TARGET_VERSION=0x020B000000000000ULL",
        *(f"-I{d}" for d in include_dirs),
    ]

    def compile_one(source: Path) -> Path:
        obj = build_dir / (source.stem + ".o")
        cmd = ["nvcc", *flags, "-c", str(source), "-o", str(obj)]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"nvcc failed on {source.name}:\n{result.stderr[-4000:]}")
        return obj

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(compile_one, sources))


def link(objects: list[Path], library_dirs: list[str], out: Path) -> None:
    cmd = [
        "nvcc",
        "-shared",
        *(str(o) for o in objects),
        *(f"-L{d}" for d in library_dirs),
        *(f"-Xlinker=-rpath,{d}" for d in library_dirs),
        "-lc10",
        "-ltorch_cpu",
        "-ltorch_cuda",
        "-ltorch",
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", type=Path, required=True, help="vllm-<ver>.tar.gz from PyPI")
    parser.add_argument("--out", type=Path, required=True, help="build folder (git-ignored)")
    parser.add_argument("--arch", default="9.0", help="CUDA compute capability, e.g. 9.0")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    args = parser.parse_args()

    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    csrc = extract_sources(args.sdist, args.out / "src")
    marlin_dir = csrc / "quantization" / "marlin"
    gen_dir = args.out / "generated"
    gen_dir.mkdir(exist_ok=True)
    kernels = generate_kernels(marlin_dir, args.arch, gen_dir)
    # marlin.cu includes the trimmed kernel_selector.h, so it must find it first.
    (marlin_dir / "kernel_selector.h").write_text((gen_dir / "kernel_selector.h").read_text())
    sources = [
        *kernels,
        marlin_dir / "marlin.cu",
        marlin_dir / "gptq_marlin_repack.cu",
        SCHEMA_SOURCE,
    ]
    torch_includes, torch_libs = torch_paths()
    python_include = sysconfig.get_paths()["include"]
    includes = [str(marlin_dir), str(csrc), *torch_includes, python_include, *cublas_include_dirs()]
    obj_dir = args.out / "obj"
    obj_dir.mkdir(exist_ok=True)
    print(f"compiling {len(sources)} units, {len(kernels)} of them kernels", flush=True)
    objects = compile_all(sources, includes, args.arch, obj_dir, args.jobs)
    library = args.out / LIBRARY_NAME
    link(objects, torch_libs, library)
    print(f"built {library} in {time.monotonic() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
