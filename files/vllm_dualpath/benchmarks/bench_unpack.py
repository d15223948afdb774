"""Unpack bandwidth against device copy, with the L2 cache out of the measurement.

    PYTHONPATH=src:benchmarks python benchmarks/bench_unpack.py --out unpack.json
    PYTHONPATH=src:benchmarks python benchmarks/bench_unpack.py --report unpack.json \\
        --png unpack.png --markdown unpack.md

Per shape, with 128x128 block scales and without, side by side in CUDA graphs, replayed in a
fresh order every round (``vllm_dualpath.timing``), every variant rotating over the same number
of sets, whose bytes together are at least --l2-factor times the GPU's L2:

- ``unpack``: the op's unpack at its defaults, each set its own weight AND its own output;
- ``unpack_one_output``: the same into one output buffer for every set (bench.py's way, where a
  small shape's output stays in L2);
- ``copy_engine`` and ``copy_kernel``: a device copy moving the unpack's bytes per call (1.5 bytes
  read and 1.5 written per weight element), by ``copy_`` (a memcpy node) and by an SM kernel;
- ``convert``: the packed FP8 bytes converted to BF16 by PyTorch (1 byte read, 2 written per
  element, the unpack's own mix of reads and writes);
- ``kt{tiles}w{warps}{n|k}``: the unpack's tilings (16x64 tiles per program, warps, and which
  grid axis is fastest), and ``older_*`` those of an older unpack module (--older) if given.

Every variant counts 3 bytes per weight element. Progress goes to stderr; the JSON is rewritten
after each shape.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import result_cli

COPY_PATHS = ("copy_engine", "copy_kernel")
BASELINES = ("unpack", "unpack_one_output", *COPY_PATHS, "convert")
# (16x64 tiles per program, warps, K blocks fastest): the tilings timed per mode. Without
# scales only a few (the kernel is the same bit copy at every tiling).
TILINGS = {
    "block": (
        *((tiles, warps, False) for tiles in (2, 4, 8, 16) for warps in (4, 8)),
        (4, 2, False),
        (8, 2, False),
        *((tiles, 4, True) for tiles in (4, 8, 16)),
    ),
    "none": ((8, 4, False), (16, 4, False), (8, 4, True)),
}
OLDER_TILINGS = ((4, 4), (8, 4))
MODES = ("block", "none")
DEFAULT_L2_FACTOR = 4
DEFAULT_BUDGET_S = 0.05
TARGET = 0.90  # unpack bandwidth / copy bandwidth, with scales


def tiling_name(k_tiles: int, num_warps: int, k_fastest: bool) -> str:
    return f"kt{k_tiles}w{num_warps}{'k' if k_fastest else 'n'}"


def default_tiling() -> str:
    """The name of the unpack's default tiling in this checkout."""
    from vllm_dualpath import unpack

    return tiling_name(unpack.DEFAULT_K_TILES, unpack.DEFAULT_NUM_WARPS, unpack.DEFAULT_K_FASTEST)


def rotation_sets(bytes_per_set: int, l2_bytes: int, factor: int = DEFAULT_L2_FACTOR) -> int:
    """Sets to rotate over so that their bytes together are at least factor x L2 (two at least,
    so no call finds the previous call's data)."""
    if bytes_per_set <= 0 or l2_bytes <= 0 or factor <= 0:
        raise ValueError("bytes per set, L2 size and factor must be positive")
    return max(2, math.ceil(factor * l2_bytes / bytes_per_set))


def copy_bytes_each_way(n: int, k: int) -> int:
    """Bytes a copy reads (and writes) per call to move what the unpack moves: 1.5 per weight
    element each way, rounded down to 16-byte vectors."""
    return (3 * n * k // 2) // 16 * 16


def moved_bytes(n: int, k: int, variant: str) -> int:
    """Bytes read plus written per call: 3 per weight element (1 FP8 byte in, 2 BF16 out)."""
    if variant in COPY_PATHS:
        return 2 * copy_bytes_each_way(n, k)
    return 3 * n * k


def bandwidths(result: dict[str, Any]) -> dict[tuple[str, str], dict[str, float]]:
    """GB/s per variant, by (shape key, mode)."""
    found: dict[tuple[str, str], dict[str, float]] = {}
    for entry in result["shapes"]:
        n, k = entry["n"], entry["k"]
        found[(f"{n}x{k}", entry["mode"])] = {
            variant: moved_bytes(n, k, variant) / (us * 1e-6) / 1e9
            for variant, us in entry["median_us"].items()
        }
    return found


def of_copy(gbps: dict[str, float]) -> dict[str, float]:
    """Each variant's bandwidth over the faster of the two copies."""
    copy = max(gbps[p] for p in COPY_PATHS)
    return {variant: value / copy for variant, value in gbps.items()}


def best_tiling(result: dict[str, Any], mode: str) -> tuple[str, float]:
    """The tiling whose worst shape is best (share of copy), and that worst share."""
    shares: dict[str, list[float]] = {}
    for (_, entry_mode), gbps in bandwidths(result).items():
        if entry_mode != mode:
            continue
        for variant, share in of_copy(gbps).items():
            if variant.startswith("kt"):
                shares.setdefault(variant, []).append(share)
    if not shares:
        return "", float("nan")
    name = max(shares, key=lambda v: min(shares[v]))
    return name, min(shares[name])


def markdown(result: dict[str, Any], tiling: str = "") -> str:
    """The table per shape and mode; ``tiling`` (a tiling variant's name) gets columns of its
    own, against the same-bytes copy and against bench.py's 2 GiB copy."""
    machine = result["machine"]
    bench_copy = result.get("bench_copy_gbps")
    lines = [
        f"GPU: {machine['gpu']} ({machine['nvidia_smi']}); L2 {machine['l2_bytes']} bytes; "
        f"each variant rotates over sets of at least {result['l2_factor']}x L2"
        + (f"; bench.py's 2 GiB device copy {bench_copy:.0f} GB/s." if bench_copy else "."),
        "",
        "| N x K | scales | sets | copy GB/s (engine / SM kernel) | unpack as run: GB/s, of copy "
        "| one output buffer, of copy "
        + (f"| {tiling}: GB/s, of copy, of 2 GiB copy " if tiling else "")
        + "| best tiling here | FP8 -> BF16 by PyTorch |",
        "|---|---|---|---|---|---|" + ("---|" if tiling else "") + "---|---|",
    ]
    sets = {(f"{e['n']}x{e['k']}", e["mode"]): e["sets"] for e in result["shapes"]}
    for (key, mode), gbps in bandwidths(result).items():
        share = of_copy(gbps)
        tilings = {v: s for v, s in share.items() if v.startswith("kt")}
        best = max(tilings, key=tilings.get) if tilings else ""
        best_text = f"{best} {tilings[best]:.0%}" if best else "-"
        chosen = ""
        if tiling:
            chosen = "| - "
            if tiling in gbps:
                chosen = f"| {gbps[tiling]:.0f}, {share[tiling]:.0%}"
                chosen += f", {gbps[tiling] / bench_copy:.0%} " if bench_copy else " "
        lines.append(
            f"| {key} | {'128x128 block' if mode == 'block' else 'none'} | {sets[(key, mode)]} | "
            f"{gbps['copy_engine']:.0f} / {gbps['copy_kernel']:.0f} | {gbps['unpack']:.0f}, "
            f"{share['unpack']:.0%} | {share['unpack_one_output']:.0%} {chosen}| {best_text} | "
            f"{share['convert']:.0%} |"
        )
    lines.append("")
    for mode in MODES:
        name, worst = best_tiling(result, mode)
        if name:
            lines.append(
                f"Best tiling over all shapes, scales {mode}: {name} (worst shape {worst:.0%})."
            )
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], png: Path, tiling: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares = {key: of_copy(g) for key, g in bandwidths(result).items()}
    keys = sorted({key for key, _ in shares}, key=lambda s: -math.prod(map(int, s.split("x"))))
    series = [
        ("unpack_one_output", "block", "as run, one output buffer (bench.py's way)", "tab:gray"),
        ("unpack", "block", "as run, block scales", "tab:blue"),
        ("unpack", "none", "as run, no scales", "tab:cyan"),
    ]
    if tiling:
        series += [
            (tiling, "block", f"{tiling}, block scales", "tab:green"),
            (tiling, "none", f"{tiling}, no scales", "tab:olive"),
        ]
    fig, axis = plt.subplots(figsize=(12, 4.5))
    width = 0.8 / len(series)
    for index, (variant, mode, label, color) in enumerate(series):
        values = [shares.get((key, mode), {}).get(variant, float("nan")) * 100 for key in keys]
        positions = [i + (index - (len(series) - 1) / 2) * width for i in range(len(keys))]
        axis.bar(positions, values, width=width, label=label, color=color)
    axis.axhline(TARGET * 100, color="red", linewidth=0.8, linestyle="--")
    axis.set_xticks(range(len(keys)), keys, fontsize=8)
    axis.set_ylabel("% of device copy bandwidth (same bytes, same rotation)")
    axis.set_ylim(0, 120)
    axis.grid(True, axis="y", alpha=0.3)
    axis.legend(fontsize=8, ncols=2)
    fig.suptitle(
        f"{result['machine']['gpu']}: unpack bandwidth with the L2 out of the measurement "
        f"(sets of >= {result['l2_factor']}x L2)",
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = result_cli.parser("bench_unpack.py", __doc__)
    parser.add_argument("--shapes", help="comma-separated shape names (default: all)")
    parser.add_argument("--l2-factor", type=int, default=DEFAULT_L2_FACTOR)
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S)
    parser.add_argument("--no-tilings", action="store_true", help="time the defaults alone")
    parser.add_argument("--older", help="an older unpack module on PYTHONPATH to time beside")
    parser.add_argument(
        "--tiling",
        help="a tiling variant the report shows on its own, e.g. kt8w4k (default: the unpack's "
        "defaults in this checkout)",
    )
    args = result_cli.parse(parser, argv)
    if args.l2_factor < 1:
        parser.error("--l2-factor must be at least 1")
    return args


@dataclass
class _Sets:
    """The rotated sets of one shape: Marlin layers, an output each, copy buffers each."""

    n: int
    k: int
    layers: list[Any]
    outputs: list[Any]
    sources: list[Any]
    targets: list[Any]


def _unpacking(
    sets: _Sets,
    kernel: Callable[..., Any],
    with_scales: bool,
    one_output: bool = False,
    **knobs: object,
) -> list[Callable[[], object]]:
    calls: list[Callable[[], object]] = []
    for i, layer in enumerate(sets.layers):
        scales = layer.scales if with_scales else None
        out = sets.outputs[0] if one_output else sets.outputs[i]
        calls.append(
            functools.partial(kernel, layer.qweight, scales, sets.n, sets.k, out=out, **knobs)
        )
    return calls


def _variants(
    sets: _Sets, mode: str, unpack: Any, older: Any, tilings: bool
) -> dict[str, list[Callable[[], object]]]:
    import torch

    with_scales = mode == "block"
    pairs = list(zip(sets.sources, sets.targets, strict=True))
    fp8_bytes = [
        layer.qweight.view(torch.uint8).view(-1)[: sets.n * sets.k] for layer in sets.layers
    ]
    variants = {
        "unpack": _unpacking(sets, unpack.unpack_weight, with_scales),
        "unpack_one_output": _unpacking(sets, unpack.unpack_weight, with_scales, one_output=True),
        "copy_engine": [functools.partial(t.copy_, s) for s, t in pairs],
        "copy_kernel": [
            functools.partial(torch.neg, s.view(torch.int16), out=t.view(torch.int16))
            for s, t in pairs
        ],
        "convert": [
            functools.partial(out.copy_, b) for b, out in zip(fp8_bytes, sets.outputs, strict=True)
        ],
    }
    for tiles, warps, k_fastest in TILINGS[mode] if tilings else ():
        variants[tiling_name(tiles, warps, k_fastest)] = _unpacking(
            sets,
            unpack.unpack_weight,
            with_scales,
            k_tiles=tiles,
            num_warps=warps,
            k_fastest=k_fastest,
        )
    if older is not None and with_scales:
        for tiles, warps in OLDER_TILINGS:
            variants[f"older_kt{tiles}w{warps}"] = _unpacking(
                sets, older.unpack_weight, with_scales, k_tiles=tiles, num_warps=warps
            )
    return variants


def _same_bits(variants: dict[str, list[Callable[[], object]]], output: Any) -> bool:
    """Whether every unpack variant writes the default's bits into the first set's output."""
    import torch

    variants["unpack"][0]()
    expected = output.clone()
    for name, calls in variants.items():
        if name.startswith(("unpack", "kt", "older")):
            output.fill_(float("nan"))
            calls[0]()
            if not torch.equal(output.view(torch.int16), expected.view(torch.int16)):
                return False
    return True


def measure(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from bench import copy_bandwidth_gbps, select_shapes
    from bench_paths import machine
    from vllm_dualpath import timing, unpack
    from vllm_dualpath.calibrate import log, require_gpu_and_marlin
    from vllm_dualpath.marlin_reference import (
        prepare_fp8_for_marlin,
        random_fp8_weight,
        random_scales,
    )

    require_gpu_and_marlin(args.marlin_lib, "the unpack benchmark")
    older = importlib.import_module(args.older) if args.older else None
    info = machine()
    l2_bytes = int(info["l2_bytes"] or 60 << 20)
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    result: dict[str, Any] = {
        "command": " ".join(sys.argv),
        "machine": info,
        "l2_factor": args.l2_factor,
        "budget_s": args.budget_s,
        # bench.py's device copy: 2 GiB, the best of an eager copy_ and an SM kernel.
        "bench_copy_gbps": copy_bandwidth_gbps(),
        "shapes": [],
    }
    log(f"{info['gpu']}: bench.py's device copy {result['bench_copy_gbps']:.0f} GB/s")
    block = (128, 128)
    for index, shape in enumerate(select_shapes(args.shapes), 1):
        n, k = shape.n, shape.k
        half = copy_bytes_each_way(n, k)
        count = rotation_sets(3 * n * k, l2_bytes, args.l2_factor)
        sets = _Sets(
            n,
            k,
            [
                prepare_fp8_for_marlin(
                    random_fp8_weight(n, k, "cuda", generator),
                    random_scales(n, k, block, "cuda", generator),
                    block,
                )
                for _ in range(count)
            ],
            [torch.empty(n * k, dtype=torch.bfloat16, device="cuda") for _ in range(count)],
            [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(count)],
            [torch.empty(half, dtype=torch.uint8, device="cuda") for _ in range(count)],
        )
        for source in sets.sources:
            source.random_(0, 256, generator=generator)
        log(f"[{index}] {shape.name} {shape.key}: {count} sets of {3 * n * k / 2**20:.1f} MiB")
        for mode in MODES:
            variants = _variants(sets, mode, unpack, older, not args.no_tilings)
            found = timing.median_call_us_side_by_side(
                variants, args.budget_s, order="shuffled", seed=index
            )
            entry = {
                "n": n,
                "k": k,
                "mode": mode,
                "sets": count,
                "median_us": found,
                "same_bits": _same_bits(variants, sets.outputs[0][: n * k]),
            }
            result["shapes"].append(entry)
            gbps = bandwidths({"shapes": [entry]})[(shape.key, mode)]
            share = of_copy(gbps)
            best = max((v for v in share if v.startswith("kt")), key=share.get, default="unpack")
            log(
                f"    {mode:5s} copy {max(gbps[p] for p in COPY_PATHS):.0f} GB/s  unpack "
                f"{gbps['unpack']:.0f} GB/s = {share['unpack']:.0%}  one output "
                f"{share['unpack_one_output']:.0%}  convert {share['convert']:.0%}  best {best} "
                f"{share[best]:.0%}  same bits: {entry['same_bits']}"
            )
        del sets
        torch.cuda.empty_cache()
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = result_cli.result(args, measure)
    tiling = args.tiling if args.tiling is not None else default_tiling()
    print(markdown(result, tiling))
    if args.png:
        plot(result, args.png, tiling)
    if args.markdown:
        args.markdown.write_text(markdown(result, tiling), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
