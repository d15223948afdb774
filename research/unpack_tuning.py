"""Side-by-side timings of unpack kernels on one GPU: tile counts x warps, and an older kernel.

    export VLLM_DUALPATH_MARLIN_LIB=build/marlin/libvllm_marlin_fp8.so
    git show REV:files/vllm_dualpath/src/vllm_dualpath/unpack.py > .cache/gpu/unpack_old.py
    export PYTHONPATH=files/vllm_dualpath/src:files/vllm_dualpath/benchmarks:.cache/gpu
    python3 research/unpack_tuning.py

Needs a CUDA GPU and vLLM's Marlin ops; the older kernel (``--older``, a module on PYTHONPATH)
is optional, and every variant must give its bits. One line per shape on standard output: the
fastest variant, then each one's time and share of device copy bandwidth (3 bytes per element).
Results: docs/perf/unpack-tuning-h200.txt.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType

import torch
from bench import copy_bandwidth_gbps
from vllm_dualpath import timing, unpack
from vllm_dualpath.calibrate import require_gpu_and_marlin
from vllm_dualpath.marlin_reference import (
    MarlinFp8Layer,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)

Block = tuple[int, int] | None
SHAPES: tuple[tuple[int, int, Block], ...] = (
    (7168, 5120, (128, 128)),
    (5120, 768, (128, 128)),
    (75776, 5120, (128, 128)),
    (2880, 2880, (128, 128)),
    (7168, 5120, None),
)
TILES = (2, 4, 8)  # 16x64 tiles per program
WARPS = (4, 8)
BUDGET_S = 0.05  # timed seconds per variant, as timing.median_call_us_side_by_side takes it
OLDER_MODULE = "unpack_old"
SEED = 0


def _call(
    kernel: Callable[..., torch.Tensor], layer: MarlinFp8Layer, block: Block, buffer: torch.Tensor
) -> Callable[..., torch.Tensor]:
    scales = None if block is None else layer.scales
    return lambda *knobs: kernel(layer.qweight, scales, layer.size_n, layer.size_k, buffer, *knobs)


def time_shape(
    n: int,
    k: int,
    block: Block,
    older: ModuleType | None,
    generator: torch.Generator,
    tile_counts: Sequence[int] = TILES,
    warp_counts: Sequence[int] = WARPS,
    budget_s: float = BUDGET_S,
) -> tuple[dict[str, float], bool]:
    sets = max(2, min(16, (256 << 20) // (n * k) + 1))
    layers = [
        prepare_fp8_for_marlin(
            random_fp8_weight(n, k, "cuda", generator),
            random_scales(n, k, block, "cuda", generator),
            block,
        )
        for _ in range(sets)
    ]
    buffer = torch.empty(n * k, dtype=torch.bfloat16, device="cuda")
    current = [_call(unpack.unpack_weight, layer, block, buffer) for layer in layers]
    reference = current[0]().clone()
    variants: dict[str, list[Callable[[], object]]] = {}
    same = True
    if older is not None:
        calls = [_call(older.unpack_weight, layer, block, buffer) for layer in layers]
        same &= torch.equal(calls[0]().view(torch.int16), reference.view(torch.int16))
        variants["older"] = calls
    for tiles in tile_counts:
        for warps in warp_counts:
            got = current[0](tiles, warps)
            same &= torch.equal(got.view(torch.int16), reference.view(torch.int16))
            variants[f"kt{tiles}w{warps}"] = [
                lambda call=call, t=tiles, w=warps: call(t, w) for call in current
            ]
    return timing.median_call_us_side_by_side(variants, budget_s), same


def _counts(text: str) -> tuple[int, ...]:
    """Comma-separated positive whole numbers."""
    try:
        counts = tuple(int(part, 10) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated whole numbers: {text!r}") from None
    if min(counts) < 1:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return counts


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--marlin-lib", help="Marlin library from tools/marlin/build.py")
    parser.add_argument(
        "--older",
        default=OLDER_MODULE,
        metavar="MODULE",
        help="module with the older kernel's unpack_weight, on PYTHONPATH; timed and compared "
        f"when it can be imported (default {OLDER_MODULE})",
    )
    parser.add_argument(
        "--tiles",
        type=_counts,
        default=TILES,
        help=f"comma-separated tiles per program (default {','.join(map(str, TILES))})",
    )
    parser.add_argument(
        "--warps",
        type=_counts,
        default=WARPS,
        help=f"comma-separated warps per program (default {','.join(map(str, WARPS))})",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=BUDGET_S,
        help=f"timed seconds per variant and shape (default {BUDGET_S})",
    )
    parser.add_argument(
        "--seed", type=int, default=SEED, help=f"seed of the random weights (default {SEED})"
    )
    args = parser.parse_args(argv)
    if args.budget_s <= 0:
        parser.error("--budget-s must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    require_gpu_and_marlin(args.marlin_lib, "unpack_tuning")
    try:
        older = importlib.import_module(args.older)
    except ImportError:
        older = None
    copy = copy_bandwidth_gbps()
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s", flush=True)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(args.seed)
    for n, k, block in SHAPES:
        medians, same = time_shape(
            n, k, block, older, generator, args.tiles, args.warps, args.budget_s
        )
        shares = " ".join(
            f"{name}:{us:.1f}us/{3 * n * k / (us * 1e-6) / 1e9 / copy:.0%}"
            for name, us in medians.items()
        )
        best = min(medians, key=medians.__getitem__)
        scaled = "block" if block else "unscaled"
        print(f"{n}x{k} {scaled} same_bits={same} best={best} {shares}", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
