"""Measure, on this GPU, where unpack + cuBLAS beats Marlin for each dense shape a rank serves.

    python -m vllm_dualpath.calibrate --model /models/ckpt --tensor-parallel-size 2 \\
        --max-m 8192 --store /calibration/tables --link /calibration/RELEASE.json

The shapes come from the checkpoint's config.json (``model_shapes``; ``--shapes NxK,...`` or the
built-in list instead), the M range from just above ``DUALPATH_SMALL_M_MAX`` up to ``--max-m``
(the service's max-num-batched-tokens), the search from ``crossover``, the timing from ``timing``
(CUDA graphs, both paths replayed in turns). ``--store``/``--link`` keep the table under its key
(``table_key``) and point the service's path at it; ``--out`` writes one file.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from vllm_dualpath import calibration, crossover, op, scratch, settings, table_key, timing
from vllm_dualpath.marlin_reference import (
    MARLIN_LIBRARY_ENV,
    MarlinFp8Layer,
    apply_fp8_marlin_linear,
    load_marlin_library,
    marlin_linear,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)
from vllm_dualpath.model_shapes import ModelConfigError, Shape, checkpoint_shapes

# A TP2 rank of a GLM-4.5/4.6-class MoE model (hidden 5120, 96 query and 8 KV heads of 128,
# shared expert 1536, dense MLP 12288, vocabulary 151552), plus shapes Marlin must pad: the
# default shapes of the calibration and of the benchmarks.
SHAPES = (
    Shape("qkv_proj", 7168, 5120),
    Shape("o_proj", 5120, 6144),
    Shape("shared_gate_up", 1536, 5120),
    Shape("shared_down", 5120, 768),
    Shape("dense_gate_up", 12288, 5120),
    Shape("lm_head", 75776, 5120),
    Shape("odd_k_2880", 2880, 2880),
    Shape("odd_n_4100", 4100, 5120),
)

# FP8 bytes the rotated weight sets span: several times a Hopper L2, so no weight is timed from it.
ROTATION_BYTES = 256 << 20
MAX_WEIGHT_SETS = 64


def weight_set_count(n: int, k: int) -> int:
    return max(2, min(MAX_WEIGHT_SETS, math.ceil(ROTATION_BYTES / (n * k))))


def log(message: str) -> None:
    """Progress for the measuring commands, on stderr (their results go to files)."""
    print(message, file=sys.stderr, flush=True)


def require_gpu_and_marlin(marlin_lib: str | None, command: str) -> None:
    """Stop with a message naming the command unless a CUDA GPU and vLLM's Marlin ops are here."""
    if not torch.cuda.is_available():
        raise SystemExit(f"{command} needs a CUDA GPU")
    if not load_marlin_library(marlin_lib):
        raise SystemExit(
            f"Marlin ops not found: set {MARLIN_LIBRARY_ENV} or pass --marlin-lib (the library "
            "tools/marlin/build.py builds), or run where vLLM is installed"
        )


def configure_overlay(
    table_path: Path | None, channel_scale: str | None = None
) -> settings.Settings:
    """Settings from the environment, this calibration table, and the reference Marlin call."""
    current = settings.load()
    if channel_scale is not None:
        current = replace(current, channel_scale=channel_scale)
    table = calibration.load(table_path) if table_path is not None else None
    op.configure(current, table)
    op.install_marlin_apply(apply_fp8_marlin_linear)
    return current


def marlin_layers(
    n: int,
    k: int,
    count: int,
    block_size: tuple[int, int] | None,
    generator: torch.Generator,
) -> list[MarlinFp8Layer]:
    """``count`` random FP8 layers of N x K, prepared for Marlin as vLLM prepares them."""
    layers = []
    for _ in range(count):
        weight = random_fp8_weight(n, k, "cuda", generator)
        scale = random_scales(n, k, block_size, "cuda", generator)
        layers.append(prepare_fp8_for_marlin(weight, scale, block_size))
        del weight
    return layers


def marlin_call(layer: MarlinFp8Layer, x: torch.Tensor) -> Callable[[], object]:
    """vLLM's Marlin call on ``x``, ready for graph capture."""
    return lambda: marlin_linear(x, layer)


def unpack_call(layer: MarlinFp8Layer, x: torch.Tensor, channel_scale: str) -> Callable[[], object]:
    """The overlay's unpack into its scratch buffer, then cuBLAS, ready for graph capture."""
    buffer = scratch.acquire(x.device, layer.size_n * layer.size_k)

    def call() -> torch.Tensor:
        return op.unpack_linear(
            x,
            layer.qweight,
            layer.scales,
            layer.size_n,
            layer.size_k,
            layer.bias,
            buffer,
            channel_scale,
        )

    return call


def measure_shape(
    shape: Shape,
    first_m: int,
    max_m: int,
    block_size: tuple[int, int] | None,
    channel_scale: str,
    budget_s: float,
    generator: torch.Generator,
) -> calibration.Ranges:
    """The M ranges where unpack + cuBLAS is faster for this shape, with a line per M measured."""
    layers = marlin_layers(
        shape.n, shape.k, weight_set_count(shape.n, shape.k), block_size, generator
    )

    def measure(m: int) -> tuple[float, float]:
        x = torch.randn(m, shape.k, device="cuda", generator=generator).to(torch.bfloat16)
        medians = timing.median_call_us_side_by_side(
            {
                "marlin": [marlin_call(layer, x) for layer in layers],
                "unpack_cublas": [unpack_call(layer, x, channel_scale) for layer in layers],
            },
            budget_s,
        )
        marlin_us, unpack_us = medians["marlin"], medians["unpack_cublas"]
        log(
            f"    M={m:<5d} marlin {marlin_us:8.1f} us  unpack+cublas {unpack_us:8.1f} us"
            f"  ratio {unpack_us / marlin_us:.2f}"
        )
        return marlin_us, unpack_us

    generic, tiles = crossover.search(first_m, max_m, measure)
    layers.clear()
    torch.cuda.empty_cache()
    return crossover.unpack_ranges(generic, first_m, tiles)


def parse_shapes(text: str) -> list[Shape]:
    shapes = []
    for item in text.split(","):
        n, _, k = item.strip().lower().partition("x")
        try:
            shapes.append(Shape(item.strip(), int(n), int(k)))
        except ValueError:
            raise SystemExit(f"--shapes: {item!r} is not NxK") from None
    return shapes


def shapes_to_measure(args: argparse.Namespace) -> list[Shape]:
    if args.model is not None:
        try:
            return checkpoint_shapes(args.model, args.tensor_parallel_size)
        except ModelConfigError as error:
            raise SystemExit(f"calibration: {error}") from None
    return parse_shapes(args.shapes) if args.shapes else list(SHAPES)


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_dualpath.calibrate", description=__doc__.split("\n\n")[0]
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=Path, help="write the table to this file")
    where.add_argument("--store", type=Path, help="keep the table here, named by its key")
    parser.add_argument("--link", type=Path, help="with --store: the path the service reads")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--model", type=Path, help="checkpoint directory (its config.json)")
    what.add_argument("--shapes", help="NxK per layer, comma-separated")
    parser.add_argument("--tensor-parallel-size", type=int, default=2)
    parser.add_argument("--max-m", type=int, default=8192, help="largest M a call can have")
    parser.add_argument("--gpu", help="GPU name for the key (default: this GPU's)")
    parser.add_argument("--driver", help="driver version for the key (default: this node's)")
    parser.add_argument("--marlin-lib", help="Marlin library from tools/marlin/build.py")
    parser.add_argument("--scales", choices=("block", "channel"), default="block")
    parser.add_argument("--channel-scale", choices=("epilogue", "unpack"))
    parser.add_argument("--budget-s", type=float, default=timing.DEFAULT_BUDGET_S)
    return parser


def write_table(table: calibration.CalibrationTable, args: argparse.Namespace) -> Path:
    """Write atomically; under --store, named by the key, with --link pointed at it."""
    assert table.key is not None
    path = args.out if args.out is not None else table_key.stored_table(args.store, table.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(calibration.dump(table) + "\n", encoding="utf-8")
    partial.replace(path)
    if args.link is not None:
        table_key.point_link(args.link, path)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = arguments()
    args = parser.parse_args(argv)
    if args.link is not None and args.store is None:
        parser.error("--link goes with --store")
    shapes = shapes_to_measure(args)
    require_gpu_and_marlin(args.marlin_lib, "calibration")

    current = configure_overlay(None, args.channel_scale)
    first_m = current.small_m_max + 1
    if args.max_m < first_m:
        parser.error(
            f"--max-m {args.max_m} is not above {settings.SMALL_M_MAX}={current.small_m_max}"
        )
    block = (128, 128) if args.scales == "block" else None
    generator = torch.Generator(device="cuda")
    generator.manual_seed(0)
    gpu = args.gpu or table_key.read_gpu_name() or torch.cuda.get_device_name()
    key = table_key.node_key(shapes, gpu, args.driver)
    log(f"calibrating {len(shapes)} shapes on {gpu}, M {first_m}..{args.max_m}")
    started = time.monotonic()
    ranges: dict[tuple[int, int], calibration.Ranges] = {}
    for index, shape in enumerate(shapes, 1):
        elapsed = time.monotonic() - started
        eta = (
            f", about {elapsed / (index - 1) * (len(shapes) - index + 1):.0f} s left"
            if index > 1
            else ""
        )
        log(f"[{index}/{len(shapes)}] {shape.name} N={shape.n} K={shape.k} ({elapsed:.0f} s{eta})")
        found = measure_shape(
            shape, first_m, args.max_m, block, current.channel_scale, args.budget_s, generator
        )
        ranges[(shape.n, shape.k)] = found
        log(f"    {crossover.describe(found)}")
    table = calibration.CalibrationTable(
        unpack_ranges=ranges, gpu=gpu, key=key, measured_up_to_m=args.max_m
    )
    path = write_table(table, args)
    log(f"wrote {path} ({len(ranges)} shapes) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
