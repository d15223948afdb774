"""CUTLASS's Hopper mixed-input GEMM (the FP8 weight converted to BF16 in registers, on its way to
the tensor cores) beside BF16 and unpack + cuBLAS, in sustained passes on one GPU at its power
limit: what a vendor-grade fused W8A16 kernel costs against the overlay's large-M path.

    python3 research/mixed_input/build.py --cutlass-wheel nvidia_cutlass-4.2.0.0-py3-none-any.whl \\
        --out build/mixed_input
    export PYTHONPATH=files/vllm_dualpath/src:files/vllm_dualpath/benchmarks
    python3 research/mixed_input_gemm.py \\
        --out OUT/mixed-input.json --png OUT/mixed-input.png

Needs a Hopper GPU, NVML, the library ``mixed_input/build.py`` builds and the Marlin library;
exits non-zero when a CUTLASS variant fails its accuracy check. Variants, method and results:
research/results/mixed-input-gemm-h100.md.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import dense_stack
import power_floor
import result_cli
import torch
from dense_stack import BLOCK, Fp8Weight, Linear
from mixed_input.build import VARIANTS
from vllm_dualpath.calibrate import log, require_gpu_and_marlin

TOOL = "mixed_input_gemm"
DEFAULT_LIBRARY = Path("build/mixed_input/libmixed_input_gemm.so")
COLORS = {
    "bf16": "black",
    "unpack_cublas": "tab:green",
    "convert_128": "tab:gray",
    "convert_128_shuffled": "tab:olive",
    "convert_256_shuffled": "tab:brown",
    "scaled_128_shuffled": "tab:red",
    "scaled_256_shuffled": "tab:purple",
}


class Functions(NamedTuple):
    """One variant's C functions (research/mixed_input/mixed_input_gemm.cu says what each does)."""

    run: Any
    workspace: Any
    prepare_weight: Any
    status_string: Any


class CutlassLibrary:
    """The variants of ``libmixed_input_gemm.so``, called through ctypes on torch's stream."""

    def __init__(self, path: Path) -> None:
        library = ctypes.CDLL(str(path))
        pointer, integer = ctypes.c_void_p, ctypes.c_int
        signatures = {
            "run": ([pointer] * 4 + [integer] * 4 + [pointer] * 2, integer),
            "workspace": ([integer] * 4, ctypes.c_size_t),
            "prepare_weight": ([pointer, pointer, integer, integer], integer),
            "status_string": ([integer], ctypes.c_char_p),
        }
        self._functions = {}
        for variant in VARIANTS:
            found = {}
            for name, (argtypes, restype) in signatures.items():
                function = getattr(library, f"{variant}_{name}")
                function.argtypes, function.restype = argtypes, restype
                found[name] = function
            self._functions[variant] = Functions(**found)
        self._workspace = torch.empty(0, dtype=torch.uint8, device="cuda")

    def _check(self, variant: str, status: int, what: str) -> None:
        if status != 0:
            message = self._functions[variant].status_string(status).decode()
            raise RuntimeError(f"{variant}: {what} failed: {message}")

    def shuffled(self, fp8: torch.Tensor) -> torch.Tensor:
        """The row-major FP8 weight [N, K] reordered as the shuffled variants read it (one layout
        for all of them: CUTLASS derives it from the MMA's operand type alone)."""
        variant = next(name for name, variant in VARIANTS.items() if variant.shuffled)
        n, k = fp8.shape
        out = torch.empty_like(fp8)
        status = self._functions[variant].prepare_weight(fp8.data_ptr(), out.data_ptr(), n, k)
        self._check(variant, status, "the weight's reordering")
        return out

    def gemm(
        self, variant: str, x: torch.Tensor, weight: torch.Tensor, group_scales: torch.Tensor
    ) -> torch.Tensor:
        """x [M, K] (BF16, contiguous) @ weight^T, the weight [N, K] prepared for ``variant``."""
        (m, k), n = x.shape, weight.shape[0]
        functions = self._functions[variant]
        needed = functions.workspace(m, n, k, BLOCK)
        if needed > self._workspace.numel():
            self._workspace = torch.empty(needed, dtype=torch.uint8, device="cuda")
        out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
        status = functions.run(
            x.data_ptr(),
            weight.data_ptr(),
            group_scales.data_ptr(),
            out.data_ptr(),
            m,
            n,
            k,
            BLOCK,
            self._workspace.data_ptr(),
            torch.cuda.current_stream().cuda_stream,
        )
        self._check(variant, status, f"the {m}x{n}x{k} GEMM")
        return out


@dataclass(frozen=True)
class CutlassWeight(Fp8Weight):
    """An FP8 layer with what CUTLASS reads besides: the weight as each variant reads it (the
    row-major FP8 weight itself, or its one shuffled copy), and the block scales as group scales
    along K ([K / 128, N], BF16: N-major, as CUTLASS takes them)."""

    prepared: dict[str, torch.Tensor]
    group_scales: torch.Tensor

    @classmethod
    def of(cls, weight: Fp8Weight, library: CutlassLibrary) -> CutlassWeight:
        per_row = weight.block_scales.to(torch.bfloat16).repeat_interleave(BLOCK, 0)[: weight.n]
        layouts = {False: weight.fp8, True: library.shuffled(weight.fp8)}
        return cls(
            weight.fp8,
            weight.block_scales,
            weight.dense,
            weight.marlin,
            {name: layouts[variant.shuffled] for name, variant in VARIANTS.items()},
            per_row.t().contiguous(),
        )


def cutlass_linear(library: CutlassLibrary, variant: str) -> Linear:
    def linear(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
        assert isinstance(weight, CutlassWeight)
        return library.gemm(variant, x, weight.prepared[variant], weight.group_scales)

    return linear


def paths(stack: list[Fp8Weight], library: CutlassLibrary) -> dict[str, Linear]:
    cutlass = {variant: cutlass_linear(library, variant) for variant in VARIANTS}
    return dense_stack.baseline_paths(stack) | cutlass


def check_accuracy(stack: list[Fp8Weight], kernels: dict[str, Linear], g: torch.Generator) -> list:
    """Each path on each layer shape against the FP32 product of the weight it multiplies (the
    dequantized BF16 weight; the bare FP8 values for the converting-only variants), as a share of
    that product's largest output. Exits non-zero when a CUTLASS variant's error is over
    dense_stack.MAX_ERROR_VS_CUBLAS x BF16 cuBLAS's."""
    rows = []
    for layer in dense_stack.one_of_each_shape(stack):
        for m in dense_stack.ACCURACY_M:
            x = dense_stack.activations(m, layer.k, g)
            # keyed by whether the path applies the scales
            exact = {
                True: x.float() @ layer.dense.float().t(),
                False: x.float() @ layer.fp8.float().t(),
            }
            largest = {scaled: product.abs().max().item() for scaled, product in exact.items()}
            row: dict[str, Any] = {"n": layer.n, "k": layer.k, "m": m}
            for name, linear in kernels.items():
                scaled = name not in VARIANTS or VARIANTS[name].scaled
                error = (linear(x, layer).float() - exact[scaled]).abs().max().item()
                row[name] = error / largest[scaled]
            log(f"accuracy {row}")
            bound = dense_stack.MAX_ERROR_VS_CUBLAS * row["bf16"]
            wrong = [variant for variant in VARIANTS if not row[variant] <= bound]
            if wrong:
                raise SystemExit(f"{TOOL}: {wrong} wrong on {layer.n}x{layer.k}, M={m}")
            rows.append(row)
    return rows


def run(
    library_path: Path, m_values: Sequence[int], window_s: float, turns: int, argv: Sequence[str]
) -> dict:
    if torch.cuda.get_device_capability() != (9, 0):
        raise SystemExit(f"{TOOL} needs a Hopper GPU (compute capability 9.0): sm_90a kernels")
    library = CutlassLibrary(library_path)
    gauge = power_floor.Gauge(power_floor.load_nvml())
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    stack: list[Fp8Weight] = [CutlassWeight.of(w, library) for w in dense_stack.random_stack(g)]
    kernels = paths(stack, library)
    accuracy = check_accuracy(stack, kernels, g)
    idle_w = power_floor.idle_power_w(gauge)
    rows = [dense_stack.measure_m(gauge, stack, kernels, m, window_s, turns, g) for m in m_values]
    header = power_floor.result_header(TOOL, argv, gauge, idle_w, window_s, turns)
    return header | {"accuracy": accuracy, "rows": rows}


def plot(result: dict, png: str) -> None:
    fig, ratio_axis, power_axis = power_floor.plot_figure()
    draw = [name for name in COLORS if name != "bf16"]
    power_floor.draw_ratios(ratio_axis, result["rows"], draw, COLORS)
    ratio_axis.axhline(1.0, color="black", linewidth=0.8, label="bf16")
    _, top = ratio_axis.get_ylim()
    ratio_axis.set_ylim(top=1.0 + 4.0 * (top - 1.0))  # room above the lines for the legend
    title = "CUTLASS's mixed-input FP8 x BF16 GEMM"
    power_floor.finish_plot(fig, power_axis, result, COLORS, title, png)


def main(argv: Sequence[str] | None = None) -> int:
    parser = power_floor.window_parser(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--library",
        type=Path,
        default=DEFAULT_LIBRARY,
        help=f"what research/mixed_input/build.py built (default {DEFAULT_LIBRARY})",
    )
    args = parser.parse_args(argv)
    if result_cli.replotted(parser, args, plot):
        return 0
    m_values = power_floor.m_values_of(parser, args)
    require_gpu_and_marlin(None, TOOL)
    if not args.library.is_file():
        raise SystemExit(f"{args.library}: not built (run research/mixed_input/build.py)")
    arguments = list(sys.argv[1:] if argv is None else argv)
    result = run(args.library, m_values, args.window_s, args.turns, arguments)
    result_cli.save(args, result, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
