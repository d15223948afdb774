"""An exact W8A16 product on FP8 tensor cores, each BF16 activation row split into two e4m3 parts
(``_split_rows_kernel``), and what its two FP8 passes cost in sustained passes at the GPU's power
limit.

    export PYTHONPATH=files/vllm_dualpath/src:files/vllm_dualpath/benchmarks
    python3 research/fp8_split_gemm.py \\
        --out OUT/fp8-split.json --png OUT/fp8-split.png

Needs a Hopper (or newer) CUDA GPU, NVML and the Marlin library; exits non-zero when the split
path fails its accuracy check. Paths, method and results: research/results/fp8-split-gemm-h100.md.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import power_floor
import result_cli
import torch
import triton
import triton.language as tl
from dense_stack import (
    ACCURACY_M,
    BLOCK,
    MAX_ERROR_VS_CUBLAS,
    Fp8Weight,
    Linear,
    activations,
    baseline_paths,
    measure_m,
    one_of_each_shape,
    random_stack,
)
from vllm_dualpath.calibrate import log, require_gpu_and_marlin

TOOL = "fp8_split_gemm"
ROW_TOP_EXPONENT = 7  # a row's largest element is scaled into [2**7, 2**8), under e4m3's 448
REFERENCES = ("fp8_split_cublas", "w8a8_cublas")
COLORS = {
    "bf16": "black",
    "unpack_cublas": "tab:green",
    "fp8_split": "tab:red",
    "fp8_split_cublas": "tab:purple",
    "w8a8_cublas": "tab:gray",
    "split_only": "tab:brown",
}
# BM x BN output tile, warps, pipeline stages: the fastest of five tried on an H100 at M = 2048
TILE = {"BM": 128, "BN": 128, "num_warps": 8, "num_stages": 4}


@triton.jit
def _e4m3_grid(v):  # type: ignore[no-untyped-def]
    """|v| (fp32, under 2**8) rounded to nearest even on the e4m3 grid, as an fp32: the grid of
    v's binade is 2**(e - 3), 2**-9 below the normal range. The rounding is an add and a
    subtract of 2**(e + 20), exact IEEE arithmetic on the GPU and in the interpreter alike."""
    magnitude = tl.abs(v)
    exponent = tl.maximum(((magnitude.to(tl.int32, bitcast=True) >> 23) & 255) - 127, -6)
    magic = ((exponent + 20 + 127) << 23).to(tl.float32, bitcast=True)
    return (magnitude + magic) - magic


@triton.jit
def _e4m3_code(grid_magnitude, negative):  # type: ignore[no-untyped-def]
    """The e4m3fn byte of a magnitude on the e4m3 grid, built from its bits (no float8 cast,
    whose rounding the interpreter does not share)."""
    bits = grid_magnitude.to(tl.int32, bitcast=True)
    exponent = ((bits >> 23) & 255) - 127
    normal = ((exponent + 7) << 3) | ((bits >> 20) & 7)
    subnormal = (grid_magnitude * 512.0).to(tl.int32)  # an exact whole number of 2**-9
    code = tl.where(exponent >= -6, normal, subnormal)
    return (code | tl.where(negative, 128, 0)).to(tl.uint8)


@triton.jit  # type: ignore[untyped-decorator]
def _split_rows_kernel(  # type: ignore[no-untyped-def]
    x_ptr, hi_ptr, lo_ptr, inverse_ptr, k, ROW: tl.constexpr, TOP: tl.constexpr
):
    """Row r of x (BF16) as (hi + lo) x inverse[r], hi and lo e4m3 bytes. The row is scaled by
    a power of two that puts its largest element (a normal BF16) in [2**TOP, 2**(TOP + 1)); an
    element's 8 significant bits are then hi (the nearest e4m3) plus lo (the rest, at most 4
    bits), exactly, down to 2**-9 of the largest (TOP = 7); smaller ones lose the bits below
    e4m3's 2**-9 (an error under 2**-10 x inverse[r])."""
    row = tl.program_id(0).to(tl.int64)
    columns = tl.arange(0, ROW)
    inside = columns < k
    x = tl.load(x_ptr + row * k + columns, mask=inside, other=0.0).to(tl.float32)
    largest = tl.max(tl.abs(x), axis=0)
    exponent = ((largest.to(tl.int32, bitcast=True) >> 23) & 255) - 127
    exponent = tl.where(largest > 0, tl.maximum(exponent, -100), 0)
    scaled = x * ((127 + TOP - exponent) << 23).to(tl.float32, bitcast=True)
    hi = _e4m3_grid(scaled)
    rest = tl.abs(scaled) - hi  # exact: both on the grid of the element's 8 bits
    lo = _e4m3_grid(rest)
    tl.store(hi_ptr + row * k + columns, _e4m3_code(hi, scaled < 0), mask=inside)
    tl.store(lo_ptr + row * k + columns, _e4m3_code(lo, (scaled < 0) != (rest < 0)), mask=inside)
    inverse = ((127 - TOP + exponent) << 23).to(tl.float32, bitcast=True)
    tl.store(inverse_ptr + row, inverse)


@triton.jit  # type: ignore[untyped-decorator]
def _split_gemm_kernel(  # type: ignore[no-untyped-def]
    hi_ptr,
    lo_ptr,
    weight_ptr,
    block_scales_ptr,
    inverse_ptr,
    out_ptr,
    m,
    n,
    k,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """out = ((hi + lo) x inverse) @ (weight x block scales)^T; weight FP8 [n, k] row-major (so
    K-major, as FP8 tensor cores read it). Each K block's two passes go into a fresh fp32 sum that
    is scaled and added to the output's (the block scale, and a promotion every BK)."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(m, BM)
    tiles_n = tl.cdiv(n, BN)
    group = pid // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % (GROUP_M * tiles_n)) % group_rows
    tile_n = (pid % (GROUP_M * tiles_n)) // group_rows
    rows = (tile_m * BM + tl.arange(0, BM)).to(tl.int64)
    channels = (tile_n * BN + tl.arange(0, BN)).to(tl.int64)
    steps = tl.arange(0, BK)
    rows_in = rows < m
    hi = hi_ptr + rows[:, None] * k + steps[None, :]
    lo = lo_ptr + rows[:, None] * k + steps[None, :]
    weight = weight_ptr + channels[None, :] * k + steps[:, None]
    k_blocks = k // BK
    block_scales = block_scales_ptr + (channels // BK) * k_blocks
    out = tl.zeros((BM, BN), dtype=tl.float32)
    for block in range(0, k_blocks):
        w = tl.load(weight)
        part = tl.dot(tl.load(hi, mask=rows_in[:, None], other=0.0), w)
        part = tl.dot(tl.load(lo, mask=rows_in[:, None], other=0.0), w, part)
        out += part * tl.load(block_scales + block)[None, :]
        hi += BK
        lo += BK
        weight += BK
    out *= tl.load(inverse_ptr + rows, mask=rows_in, other=0.0)[:, None]
    # fp32 -> BF16 to nearest even on the bits (the interpreter's cast truncates); out is finite
    bits = out.to(tl.int32, bitcast=True)
    bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).to(tl.int16)
    tl.store(out_ptr + rows[:, None] * n + channels[None, :], bf16, rows_in[:, None])


SplitRows = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # hi, lo (e4m3), inverse (fp32)


def split(x: torch.Tensor) -> SplitRows:
    """x (BF16 [M, K], contiguous) as e4m3 hi and lo and a per-row inverse scale."""
    if x.dtype != torch.bfloat16 or x.dim() != 2 or not x.is_contiguous():
        raise ValueError("expected a contiguous 2-D BF16 activation [M, K]")
    m, k = x.shape
    hi = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    lo = torch.empty_like(hi)
    inverse = torch.empty(m, dtype=torch.float32, device=x.device)
    row = triton.next_power_of_2(k)
    _split_rows_kernel[(m,)](
        x,
        hi.view(torch.uint8),
        lo.view(torch.uint8),
        inverse,
        k,
        row,
        ROW_TOP_EXPONENT,
        num_warps=min(16, max(4, row // 512)),  # a whole row in registers, without spilling
    )
    return hi, lo, inverse


def split_linear(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
    """x @ W^T through ``_split_rows_kernel`` and ``_split_gemm_kernel``."""
    if weight.n % BLOCK or weight.k % BLOCK:
        raise ValueError(f"needs N and K in whole {BLOCK}-wide blocks, got {weight.n}x{weight.k}")
    if x.shape[-1] != weight.k:
        raise ValueError(f"x has K={x.shape[-1]}, the weight K={weight.k}")
    hi, lo, inverse = split(x)
    m = x.shape[0]
    out = torch.empty(m, weight.n, dtype=torch.bfloat16, device=x.device)
    grid = (triton.cdiv(m, TILE["BM"]) * (weight.n // TILE["BN"]),)
    _split_gemm_kernel[grid](
        hi,
        lo,
        weight.fp8,
        weight.block_scales,
        inverse,
        out.view(torch.int16),
        m,
        weight.n,
        weight.k,
        BK=BLOCK,
        GROUP_M=8,
        **TILE,
    )
    return out


def cublas_split(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
    """Both parts as 2M rows through torch's FP8 GEMM (row-wise scales, no block scales: the
    cost of the work, not its numbers); the halves meet in BF16."""
    hi, lo, inverse = split(x)
    rows = torch.cat([inverse, inverse])[:, None]
    ones = torch.ones(1, weight.n, device=x.device)
    both = torch._scaled_mm(
        torch.cat([hi, lo]), weight.fp8.t(), rows, ones, out_dtype=torch.bfloat16
    )
    return both[: x.shape[0]] + both[x.shape[0] :]


def cublas_w8a8(x: torch.Tensor, weight: Fp8Weight) -> torch.Tensor:
    """One FP8 pass with the activations rounded to e4m3 (``hi`` alone)."""
    hi, _, inverse = split(x)
    ones = torch.ones(1, weight.n, device=x.device)
    return torch._scaled_mm(hi, weight.fp8.t(), inverse[:, None], ones, out_dtype=torch.bfloat16)


def paths(stack: list[Fp8Weight]) -> dict[str, Linear]:
    return baseline_paths(stack) | {
        "fp8_split": split_linear,
        "fp8_split_cublas": cublas_split,
        "w8a8_cublas": cublas_w8a8,
    }


def check_accuracy(stack: list[Fp8Weight], kernels: dict[str, Linear], g: torch.Generator) -> list:
    """Each path on each layer shape against FP32 products of the dequantized BF16 weight (what
    cuBLAS multiplies) and of the unrounded one (FP8 x scale, what the split path multiplies),
    as a share of the largest output. Exits non-zero when the split path's error against the
    unrounded weight is over MAX_ERROR_VS_CUBLAS x cuBLAS's against its own."""
    rows = []
    for weight in one_of_each_shape(stack):
        for m in ACCURACY_M:
            x = activations(m, weight.k, g)
            rounded = x.float() @ weight.dense.float().t()
            unrounded = x.float() @ weight.unrounded().t()
            largest = rounded.abs().max().item()
            row: dict[str, Any] = {"n": weight.n, "k": weight.k, "m": m}
            for name, linear in kernels.items():
                if name in REFERENCES:
                    continue  # costs only: their numbers are not the product's
                y = linear(x, weight).float()
                row[name] = (y - rounded).abs().max().item() / largest
                row[f"{name}_vs_unrounded"] = (y - unrounded).abs().max().item() / largest
            log(f"accuracy {row}")
            if not row["fp8_split_vs_unrounded"] <= MAX_ERROR_VS_CUBLAS * row["bf16"]:
                raise SystemExit(f"{TOOL}: fp8_split is wrong on {weight.n}x{weight.k}, M={m}")
            rows.append(row)
    return rows


def split_passes(inputs: list[torch.Tensor]) -> dict[str, power_floor.Pass]:
    return {"split_only": lambda: [split(x) for x in inputs]}


def run(m_values: Sequence[int], window_s: float, turns: int, argv: Sequence[str]) -> dict:
    major, _ = torch.cuda.get_device_capability()
    if major < 9:
        raise SystemExit(f"{TOOL} needs FP8 tensor cores (compute capability 9.0 or newer)")
    gauge = power_floor.Gauge(power_floor.load_nvml())
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    stack = random_stack(g)
    kernels = paths(stack)
    accuracy = check_accuracy(stack, kernels, g)
    idle_w = power_floor.idle_power_w(gauge)
    rows = [measure_m(gauge, stack, kernels, m, window_s, turns, g, split_passes) for m in m_values]
    header = power_floor.result_header(TOOL, argv, gauge, idle_w, window_s, turns)
    return header | {"tile": TILE, "accuracy": accuracy, "rows": rows}


def plot(result: dict, png: str) -> None:
    fig, ratio_axis, power_axis = power_floor.plot_figure()
    draw = [name for name in COLORS if name != "bf16"]
    power_floor.draw_ratios(ratio_axis, result["rows"], draw, COLORS)
    ratio_axis.axhline(1.0, color="black", linewidth=0.8, label="bf16")
    title = "the W8A16 product on FP8 tensor cores"
    power_floor.finish_plot(fig, power_axis, result, COLORS, title, png)


def main(argv: Sequence[str] | None = None) -> int:
    parser = power_floor.window_parser(__doc__.split("\n\n")[0])
    args = parser.parse_args(argv)
    if result_cli.replotted(parser, args, plot):
        return 0
    m_values = power_floor.m_values_of(parser, args)
    require_gpu_and_marlin(None, TOOL)
    arguments = list(sys.argv[1:] if argv is None else argv)
    result = run(m_values, args.window_s, args.turns, arguments)
    result_cli.save(args, result, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
