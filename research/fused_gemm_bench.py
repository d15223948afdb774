"""The measurement the fused W8A16 GEMM probes share (``register_a_gemm.py``,
``warp_specialized_gemm.py``): an accuracy check against FP32, each dense layer alone and the
16-layer dense stack in forward order, timed beside BF16 cuBLAS and the overlay's
unpack + cuBLAS on one Hopper GPU, and the plot of a result.

Every time is device time of work queued while the GPU sleeps, so the host's launch cost (a
Gluon launch builds its TMA descriptors on the host) is in none of them.
"""

from __future__ import annotations

import platform
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import bench_model
import result_cli
import torch
import triton
from vllm_dualpath.calibrate import configure_overlay, require_gpu_and_marlin
from vllm_dualpath.unpack import unpack_weight

# x [M, K] BF16, the Marlin words, their scales, N, K -> [M, N] BF16
Linear = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, int, int], torch.Tensor]
M_VALUES = (1024, 2048, 4096)
ACCURACY_M = (1000, 1024)  # a ragged tile and a whole one
MAX_ERROR_VS_CUBLAS = 1.5
LAYER_CALLS = 10  # calls of one layer queued per timing
REPEATS = 12
SLEEP_CYCLES = 40_000_000  # long enough for the host to queue everything behind it


@dataclass(frozen=True)
class Probe:
    """One fused kernel's variants: ``kernels`` by name, and each one's JSON description."""

    tool: str
    kernels: dict[str, Linear]
    configs: list[dict[str, object]]


def check_accuracy(probe: Probe, stack: list, g: torch.Generator) -> list[dict]:
    """Each layer shape at ACCURACY_M against an FP32 product of the same dequantized weight;
    exits non-zero if a kernel's error is over MAX_ERROR_VS_CUBLAS x cuBLAS's."""
    rows = []
    for shape, weights in stack[: len(bench_model.LAYER_SHAPES)]:
        for m in ACCURACY_M:
            x = torch.randn(m, shape.k, device="cuda", generator=g).to(torch.bfloat16)
            reference = x.float() @ weights.dense.float().t()
            scale = reference.abs().max().item()
            outputs = {"cublas": torch.nn.functional.linear(x, weights.dense)}
            for name, linear in probe.kernels.items():
                outputs[name] = linear(
                    x, weights.marlin.qweight, weights.marlin.scales, shape.n, shape.k
                )
            row: dict[str, object] = {"layer": shape.name, "m": m}
            for name, y in outputs.items():
                row[name] = (y.float() - reference).abs().max().item() / scale
            worst = max(float(row[name]) for name in probe.kernels)  # type: ignore[arg-type]
            if not worst <= MAX_ERROR_VS_CUBLAS * float(row["cublas"]):  # type: ignore[arg-type]
                raise SystemExit(f"{probe.tool}: wrong on {shape.name} at M = {m}: {row}")
            rows.append(row)
            print(f"accuracy {row}", file=sys.stderr, flush=True)
    return rows


def queued_us(runs: dict[str, Callable[[], object]], calls: int) -> dict[str, float]:
    """Median device time of one call of each run, ``calls`` calls queued behind a GPU sleep,
    the runs interleaved over REPEATS rounds."""
    for run in runs.values():
        run()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(REPEATS):
        for name, run in runs.items():
            torch.cuda._sleep(SLEEP_CYCLES)
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                run()
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3 / calls)
    return {name: statistics.median(t) for name, t in times.items()}


def per_layer_us(probe: Probe, stack: list, g: torch.Generator) -> list[dict]:
    """Each layer alone, LAYER_CALLS calls back to back, microseconds a call."""
    scratch = torch.empty(max(s.n * s.k for s, _ in stack), dtype=torch.bfloat16, device="cuda")
    rows = []
    for shape, w in stack[: len(bench_model.LAYER_SHAPES)]:
        for m in M_VALUES:
            x = torch.randn(m, shape.k, device="cuda", generator=g).to(torch.bfloat16)
            q, s, n, k = w.marlin.qweight, w.marlin.scales, shape.n, shape.k
            runs: dict[str, Callable[[], object]] = {
                "bf16": lambda x=x, w=w: torch.nn.functional.linear(x, w.dense),
                "unpack_cublas": lambda x=x, q=q, s=s, n=n, k=k: torch.nn.functional.linear(
                    x, unpack_weight(q, s, n, k, out=scratch)
                ),
            }
            for name, linear in probe.kernels.items():
                runs[name] = lambda x=x, q=q, s=s, n=n, k=k, f=linear: f(x, q, s, n, k)
            row = {"layer": shape.name, "m": m} | queued_us(runs, LAYER_CALLS)
            rows.append(row)
            print(f"layer {row}", file=sys.stderr, flush=True)
    return rows


def stack_us(probe: Probe, stack: list, g: torch.Generator) -> list[dict]:
    """The 16-layer dense stack in forward order, microseconds a pass."""
    rows = []
    for m in M_VALUES:
        base = replace(
            configure_overlay(None), small_m_max=0, large_m_min=m, unpack_ahead_min_m=1 << 30
        )
        xs = [torch.randn(m, s.k, device="cuda", generator=g).to(torch.bfloat16) for s, _ in stack]
        passes = bench_model.make_passes(stack, xs, base)
        runs: dict[str, Callable[[], object]] = {
            "bf16": passes["bf16"],
            "unpack_cublas": passes["unpack_cublas"],
        }
        for name, linear in probe.kernels.items():
            runs[name] = lambda f=linear, xs=xs: [
                f(x, w.marlin.qweight, w.marlin.scales, s.n, s.k)
                for (s, w), x in zip(stack, xs, strict=True)
            ]
        row = {"m": m} | queued_us(runs, 1)
        rows.append(row)
        print(f"stack {row}", file=sys.stderr, flush=True)
    return rows


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = [c["name"] for c in result["configs"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    ms = [row["m"] for row in result["stack"]]
    for name in ["unpack_cublas", *configs]:
        left.plot(ms, [r[name] / r["bf16"] for r in result["stack"]], marker="o", label=name)
    left.set_title("16-layer dense stack: pass time / BF16")
    best = min(configs, key=lambda name: sum(r[name] / r["bf16"] for r in result["stack"]))
    for layer in bench_model.LAYER_SHAPES:
        rows = [r for r in result["per_layer"] if r["layer"] == layer]
        right.plot(
            [r["m"] for r in rows], [r[best] / r["bf16"] for r in rows], marker="o", label=layer
        )
    right.set_title(f"each layer alone: {best} / BF16")
    for axes in (left, right):
        axes.set_xscale("log", base=2)
        axes.set_xticks(M_VALUES, [str(m) for m in M_VALUES])
        axes.axhline(1.0, color="grey", linewidth=0.8)
        axes.set_xlabel("M (tokens)")
        axes.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(probe: Probe, description: str, argv: Sequence[str] | None = None) -> int:
    """The probes' command line: measure on the GPU (--out, --png) or replot a result."""
    parser = result_cli.parser(description)
    args = parser.parse_args(argv)
    if result_cli.replotted(parser, args, plot):
        return 0
    require_gpu_and_marlin(None, probe.tool)
    if torch.cuda.get_device_capability()[0] != 9:
        raise SystemExit(f"{probe.tool} needs a Hopper GPU (wgmma)")
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    stack = bench_model.build_stack(4, g)
    arguments = list(sys.argv[1:] if argv is None else argv)
    result = {
        "command": " ".join([f"python3 research/{probe.tool}.py", *arguments]),
        "device": torch.cuda.get_device_name(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "triton": triton.__version__,
        },
        "timing": (
            f"device time queued behind a GPU sleep, median of {REPEATS}; "
            f"layers: {LAYER_CALLS} calls back to back; stack: one pass"
        ),
        "configs": probe.configs,
        "accuracy": check_accuracy(probe, stack, g),
        "per_layer": per_layer_us(probe, stack, g),
        "stack": stack_us(probe, stack, g),
    }
    result_cli.save(args, result, plot)
    return 0
