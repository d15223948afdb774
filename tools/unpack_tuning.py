"""Side-by-side timings of unpack kernels on one GPU: tile counts x warps, and an older kernel.

    git show REV:files/vllm_dualpath/src/vllm_dualpath/unpack.py > .cache/gpu/unpack_old.py
    PYTHONPATH=files/vllm_dualpath/src:.cache/gpu python3 tools/unpack_tuning.py

Every variant must give the older kernel's bits; the line per shape names the fastest and each
variant's time and share of the device copy bandwidth (3 bytes per element).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import torch
from vllm_dualpath import timing, unpack
from vllm_dualpath.marlin_reference import (
    MarlinFp8Layer,
    load_marlin_library,
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


def _call(
    kernel: Callable[..., torch.Tensor], layer: MarlinFp8Layer, block: Block, buffer: torch.Tensor
) -> Callable[..., torch.Tensor]:
    scales = None if block is None else layer.scales
    return lambda *knobs: kernel(layer.qweight, scales, layer.size_n, layer.size_k, buffer, *knobs)


def time_shape(
    n: int, k: int, block: Block, older: ModuleType | None, generator: torch.Generator
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
    for tiles in (2, 4, 8):
        for warps in (4, 8):
            got = current[0](tiles, warps)
            same &= torch.equal(got.view(torch.int16), reference.view(torch.int16))
            variants[f"kt{tiles}w{warps}"] = [
                lambda call=call, t=tiles, w=warps: call(t, w) for call in current
            ]
    return timing.median_call_us_side_by_side(variants, 0.05), same


def main() -> None:
    if not load_marlin_library():
        raise SystemExit("Marlin ops not found: set VLLM_DUALPATH_MARLIN_LIB")
    try:
        older = importlib.import_module("unpack_old")
    except ImportError:
        older = None
    copy = timing.copy_bandwidth_gbps()
    print(f"{torch.cuda.get_device_name()}: copy {copy:.0f} GB/s", flush=True)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    for n, k, block in SHAPES:
        medians, same = time_shape(n, k, block, older, generator)
        shares = " ".join(
            f"{name}:{us:.1f}us/{3 * n * k / (us * 1e-6) / 1e9 / copy:.0%}"
            for name, us in medians.items()
        )
        best = min(medians, key=medians.__getitem__)
        scaled = "block" if block else "unscaled"
        print(f"{n}x{k} {scaled} same_bits={same} best={best} {shares}", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
