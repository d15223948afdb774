"""Side-by-side timings of the fused W8A16 GEMM's tilings against BF16 cuBLAS and unpack + cuBLAS.

    PYTHONPATH=files/vllm_dualpath/src python3 tools/fused_tuning.py --out fused-tuning.json
    PYTHONPATH=files/vllm_dualpath/src python3 tools/fused_tuning.py --plot fused-tuning.json PNG

For each dense shape of a TP2 rank and each M: `bf16` (F.linear on the dequantized weight),
`marlin` (vLLM's Marlin call), `unpack_cublas` (the overlay's in-line unpack, then cuBLAS) and
every candidate tiling of
``vllm_dualpath.fused``, as CUDA-graph replays in turns over rotating weight sets. Each tiling's
output must match unpack + cuBLAS to a BF16 rounding; one that fails to build or to match is
reported and left out. Prints a line per shape and M, writes every number to --out.
--plot draws a written result (anywhere, no GPU): per shape, time / BF16 over M.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import torch
from vllm_dualpath import fused, scratch, timing
from vllm_dualpath.bench import SHAPES, weight_set_count
from vllm_dualpath.bench_model import LAYER_SHAPES, SUM_ORDER_TOLERANCE
from vllm_dualpath.bench_paths import (
    WeightSet,
    log,
    make_weight_sets,
    path_factories,
    require_gpu_and_marlin,
)

M_VALUES = (256, 1024, 2048, 4096, 8192)
CANDIDATES = {
    "planes-m128n128k64w8": fused.Tiling(128, 2, 4, 8, 3),
    "planes-m128n128k128w8": fused.Tiling(128, 2, 8, 8, 3),
    "planes-left-m128n128k64w4": fused.Tiling(128, 2, 4, 4, 3, weight_left=True),
    "planes-left-m128n256k64w8": fused.Tiling(128, 4, 4, 8, 3, weight_left=True),
    "unshuffle-m64n128k64w4": fused.Tiling(64, 2, 4, 4, 3, unshuffle=True),
    "unshuffle-m128n128k64w8": fused.Tiling(128, 2, 4, 8, 3, unshuffle=True),
    "unshuffle-m128n256k64w8": fused.Tiling(128, 4, 4, 8, 3, unshuffle=True),
    "unshuffle-left-m64n128k64w4": fused.Tiling(64, 2, 4, 4, 3, weight_left=True, unshuffle=True),
    "unshuffle-left-m128n128k64w8": fused.Tiling(128, 2, 4, 8, 3, weight_left=True, unshuffle=True),
    "unshuffle-left-m128n128k128w8": fused.Tiling(
        128, 2, 8, 8, 3, weight_left=True, unshuffle=True
    ),
    "unshuffle-left-m128n256k64w8": fused.Tiling(128, 4, 4, 8, 3, weight_left=True, unshuffle=True),
}


def _fused_call(w: WeightSet, x: torch.Tensor, tiling: fused.Tiling) -> Callable[[], torch.Tensor]:
    layer = w.marlin
    return lambda: fused.fused_linear(
        x, layer.qweight, layer.scales, None, layer.bias, layer.size_n, layer.size_k, tiling
    )


def _working(
    weights: list[WeightSet], x: torch.Tensor, reference: torch.Tensor
) -> tuple[dict[str, fused.Tiling], dict[str, str]]:
    """Tilings that build and give unpack + cuBLAS's values; why each other one does not."""
    working, failed = {}, {}
    for name, tiling in CANDIDATES.items():
        try:
            got = _fused_call(weights[0], x, tiling)()
        except Exception as error:  # a tiling too big for the chip's shared memory is a result
            failed[name] = f"{type(error).__name__}: {str(error)[:120]}"
            continue
        distance = ((got.float() - reference.float()).norm() / reference.float().norm()).item()
        if distance <= SUM_ORDER_TOLERANCE:
            working[name] = tiling
        else:
            failed[name] = f"{distance:.2e} away from unpack + cuBLAS"
    return working, failed


def tune(m_values: list[int], budget_s: float, out: Path) -> list[dict[str, object]]:
    """Rows of medians per shape and M; written to `out` after each shape (a cut-off run keeps
    what it measured)."""
    generator = torch.Generator(device="cuda")
    generator.manual_seed(2)
    by_name = {s.name: s for s in SHAPES}
    factories = path_factories("epilogue")
    rows: list[dict[str, object]] = []
    for name in LAYER_SHAPES:
        shape = by_name[name]
        weights = make_weight_sets(
            shape.n, shape.k, weight_set_count(shape.n, shape.k), (128, 128), generator
        )
        for m in m_values:
            x = torch.randn(m, shape.k, device="cuda", generator=generator).to(torch.bfloat16)
            reference = factories["unpack_cublas"](weights[0], x)()
            assert isinstance(reference, torch.Tensor)
            working, failed = _working(weights, x, reference)
            baselines = ("bf16", "marlin", "unpack_cublas")
            variants = {p: [factories[p](w, x) for w in weights] for p in baselines}
            for tiling_name, tiling in working.items():
                variants[tiling_name] = [_fused_call(w, x, tiling) for w in weights]
            medians = timing.median_call_us_side_by_side(variants, budget_s)
            bf16 = medians["bf16"]
            best = min(working, key=medians.__getitem__) if working else None
            summary = f"best {best} {medians[best] / bf16:.3f}x" if best else "no tiling works"
            log(
                f"{name} {shape.n}x{shape.k} M={m}: bf16 {bf16:.1f} us, marlin "
                f"{medians['marlin'] / bf16:.3f}x, unpack+cuBLAS "
                f"{medians['unpack_cublas'] / bf16:.3f}x, fused {summary}; "
                + " ".join(f"{t}:{medians[t] / bf16:.3f}" for t in working)
            )
            for failure in failed.items():
                log(f"    {failure[0]}: {failure[1]}")
            rows.append(
                {
                    "shape": name,
                    "n": shape.n,
                    "k": shape.k,
                    "m": m,
                    "median_us": medians,
                    "failed": failed,
                }
            )
        out.write_text(
            json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1) + "\n"
        )
        del weights
        scratch.release_all()
        torch.cuda.empty_cache()
    return rows


def plot(result: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = json.loads(result.read_text())["rows"]
    shapes = list(dict.fromkeys(row["shape"] for row in rows))
    fig, axes = plt.subplots(1, len(shapes), figsize=(4 * len(shapes), 3.6), sharey=True)
    for axis, shape in zip(axes, shapes, strict=True):
        mine = [row for row in rows if row["shape"] == shape]
        ms = [row["m"] for row in mine]

        def ratios(pick: Callable[[dict[str, float]], float], rows: list = mine) -> list[float]:
            return [pick(row["median_us"]) / row["median_us"]["bf16"] for row in rows]

        def best_fused(medians: dict[str, float]) -> float:
            return min(
                v for k, v in medians.items() if k not in ("bf16", "marlin", "unpack_cublas")
            )

        axis.plot(ms, ratios(lambda t: t["marlin"]), "o-", label="Marlin FP8", color="tab:orange")
        axis.plot(
            ms,
            ratios(lambda t: t["unpack_cublas"]),
            "o-",
            label="unpack + cuBLAS",
            color="tab:green",
        )
        axis.plot(ms, ratios(best_fused), "o-", label="fused, best tiling", color="tab:red")
        axis.axhline(1.0, color="black", linewidth=0.8)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log", base=2)
        axis.set_xlabel("M")
        axis.set_title(f"{shape} {mine[0]['n']}x{mine[0]['k']}", fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("time / BF16 cuBLAS")
    axes[0].legend(fontsize=8)
    fig.suptitle("fused W8A16 GEMM against BF16 cuBLAS, one layer at a time", fontsize=11)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot", nargs=2, type=Path, metavar=("JSON", "PNG"), help="plot only")
    parser.add_argument("--out", type=Path, help="JSON results file")
    parser.add_argument("--marlin-lib", help="Marlin library from tools/marlin/build.py")
    parser.add_argument("--m", help="comma-separated M values (default: 256..8192)")
    parser.add_argument("--budget-s", type=float, default=0.03, help="timed seconds per variant")
    args = parser.parse_args()
    if args.plot:
        plot(*args.plot)
        return 0
    if args.out is None:
        parser.error("--out is required to measure")
    require_gpu_and_marlin(args.marlin_lib, "the fused tiling sweep")
    m_values = [int(m) for m in args.m.split(",")] if args.m else list(M_VALUES)
    log(f"{torch.cuda.get_device_name()}: {len(CANDIDATES)} tilings, 128x128 block scales")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tune(m_values, args.budget_s, args.out)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
