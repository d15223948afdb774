"""Model-level benchmark: a stack of dense layers run in forward order, as a prefill step sees them.

    PYTHONPATH=src python benchmarks/bench_model.py --out model.json
    PYTHONPATH=src python benchmarks/bench_model.py --timing queued --step decoder --link-gbs 200 \\
        --out step.json

Decoder layers of a TP2 rank, each with its own weights, in eager passes (as vLLM runs prefill
batches above its graph sizes) per path of ``make_passes``; the ahead paths' outputs are checked
bit for bit against in-line unpacking first. ``--step decoder`` adds each decoder layer's other
work between the dense layers (``step_work``); ``model_report``'s targets are set on the dense step.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch

import step_work
from bench_paths import WeightSet, make_weight_sets
from model_report import SLOT_FREE, path_of_depth
from vllm_dualpath import ahead, op, scratch, settings, unpack
from vllm_dualpath.calibrate import SHAPES, Shape, configure_overlay, log, require_gpu_and_marlin
from vllm_dualpath.marlin_reference import marlin_linear

M_VALUES = (512, 1024, 2048, 4096, 8192)
LAYER_SHAPES = step_work.DECODER_LAYERS
WARMUP_PASSES = 3
BACK_TO_BACK = 3  # timed passes queued behind each untimed one (timing 'queued')

Pass = Callable[[], list[torch.Tensor]]


def build_stack(decoder_layers: int, generator: torch.Generator) -> list[tuple[Shape, WeightSet]]:
    by_name = {s.name: s for s in SHAPES}
    stack = []
    for _ in range(decoder_layers):
        for name in LAYER_SHAPES:
            shape = by_name[name]
            (weights,) = make_weight_sets(shape.n, shape.k, 1, (128, 128), generator)
            stack.append((shape, weights))
    return stack


Layer = Callable[[Shape, WeightSet, torch.Tensor], torch.Tensor]


AHEAD_DEPTHS = (1, 2)
AHEAD_PATHS = (*(path_of_depth(depth) for depth in AHEAD_DEPTHS), SLOT_FREE)

STEPS = ("dense", "decoder")


def make_passes(
    stack: list[tuple[Shape, WeightSet]],
    inputs: list[torch.Tensor],
    base: settings.Settings,
    work_after: dict[int, step_work.Work] | None = None,
) -> dict[str, Pass]:
    """One pass per path: every dense layer in order, each followed by its ``work_after``."""
    pairs = list(enumerate(zip(stack, inputs, strict=True)))
    after = work_after or {}

    def through(layer: Layer) -> list[torch.Tensor]:
        outputs = []
        for index, ((shape, weights), x) in pairs:
            outputs.append(layer(shape, weights, x))
            work = after.get(index)
            if work is not None:
                work()
        return outputs

    def dense() -> list[torch.Tensor]:
        return through(lambda _, w, x: torch.nn.functional.linear(x, w.dense))

    def marlin() -> list[torch.Tensor]:
        return through(lambda _, w, x: marlin_linear(x, w.marlin))

    def overlay(unpack_ahead: bool, depth: int = 1, after_gemm: bool = True) -> Pass:
        current = replace(base, unpack_ahead=unpack_ahead, unpack_ahead_depth=depth)
        dual = torch.ops.dualpath.fp8_marlin_linear
        state = ahead.for_device(inputs[0].device)

        def layer(s: Shape, w: WeightSet, x: torch.Tensor) -> torch.Tensor:
            m = w.marlin
            return dual(x, m.qweight, m.scales, None, s.n, s.k, m.bias, True)  # type: ignore[no-any-return]

        def run() -> list[torch.Tensor]:
            op.configure(current, None)
            state.after_gemm = after_gemm
            return through(layer)

        return run

    return {
        "bf16": dense,
        "marlin": marlin,
        "unpack_cublas": overlay(False),
        **{path_of_depth(depth): overlay(True, depth) for depth in AHEAD_DEPTHS},
        SLOT_FREE: overlay(True, after_gemm=False),
    }


def check_same_outputs(passes: dict[str, Pass]) -> None:
    """Each ahead path gives the in-line unpack's bits on every layer, twice in a row."""
    expected = passes["unpack_cublas"]()
    for name in AHEAD_PATHS:
        for _ in range(2):
            got = passes[name]()
            pairs = enumerate(zip(got, expected, strict=True))
            bad = [i for i, (g, e) in pairs if not torch.equal(g, e)]
            if bad:
                raise SystemExit(f"{name}: layers {bad} differ from the in-line unpack")


TIMINGS = ("isolated", "queued")


def _sm_clock_mhz() -> float | None:
    """The SM clock now (NVML, while the GPU runs the queued passes), or None without NVML."""
    try:
        return float(torch.cuda.clock_rate())
    except Exception:  # no pynvml, or NVML unavailable: the clock is a note, not a result
        return None


@dataclass
class PassTimes:
    device_us: dict[str, float]
    host_us: dict[str, float]
    sm_clock_mhz: dict[str, float | None]


def median_pass_us(passes: dict[str, Pass], budget_s: float, timing: str = "isolated") -> PassTimes:
    """Median device time of a pass, host time to issue one, and SM clock while they ran.

    `isolated`: each pass from an idle GPU, the host's first call in its time. `queued`: passes
    back to back behind an untimed one, as a forward pass's dense layers start behind queued
    work, so the clock settles where the power limit puts it."""
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {TIMINGS}, got {timing!r}")
    for run in passes.values():
        for _ in range(WARMUP_PASSES):
            run()
    torch.cuda.synchronize()
    timed_per_turn = BACK_TO_BACK if timing == "queued" else 1
    device: dict[str, list[float]] = {name: [] for name in passes}
    host: dict[str, list[float]] = {name: [] for name in passes}
    clocks: dict[str, list[float]] = {name: [] for name in passes}
    deadline = time.monotonic() + budget_s * len(passes)
    while min(len(t) for t in device.values()) < 5 or time.monotonic() < deadline:
        for name, run in passes.items():
            edges = [torch.cuda.Event(enable_timing=True) for _ in range(timed_per_turn + 1)]
            if timing == "queued":
                run()
            edges[0].record()
            for edge in edges[1:]:
                issued = time.perf_counter()
                run()
                host[name].append((time.perf_counter() - issued) * 1e6)
                edge.record()
            clock = _sm_clock_mhz()
            if clock is not None:
                clocks[name].append(clock)
            edges[-1].synchronize()
            device[name].extend(a.elapsed_time(b) * 1e3 for a, b in itertools.pairwise(edges))
        if min(len(t) for t in device.values()) >= 200:
            break
    return PassTimes(
        {name: statistics.median(t) for name, t in device.items()},
        {name: statistics.median(t) for name, t in host.items()},
        {name: statistics.median(t) if t else None for name, t in clocks.items()},
    )


HOST_CALLS = 200


def host_call_us(shape: Shape, weights: WeightSet, x: torch.Tensor) -> dict[str, float]:
    """Host time to issue one call of each piece of the in-line path, alone (the GPU drains in
    between): the unpack's launch, repeated directly as the op does and through Triton's
    dispatch, side by side; and the GEMM's ``F.linear``."""
    buffer = torch.empty(shape.n * shape.k, dtype=torch.bfloat16, device=x.device)
    layer = weights.marlin
    calls: dict[str, Callable[[], object]] = {
        "unpack_launch": lambda: unpack.unpack_weight(
            layer.qweight, layer.scales, shape.n, shape.k, buffer
        ),
        "unpack_launch_dispatched": lambda: unpack.unpack_weight(
            layer.qweight, layer.scales, shape.n, shape.k, buffer, direct=False
        ),
        "linear": lambda: torch.nn.functional.linear(x, buffer.view(shape.n, shape.k)),
    }
    result = {}
    for name, call in calls.items():
        call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(HOST_CALLS):
            call()
        result[name] = (time.perf_counter() - start) / HOST_CALLS * 1e6
        torch.cuda.synchronize()
    return result


def run(
    decoder_layers: int,
    m_values: Sequence[int],
    budget_s: float,
    out: Path,
    timing: str = "isolated",
    step: str = "dense",
    link_gbs: float | None = None,
) -> dict[str, object]:
    if step not in STEPS:
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    if link_gbs is not None and step != "decoder":
        raise ValueError("a link wait belongs to the decoder step")
    generator = torch.Generator(device="cuda")
    generator.manual_seed(1)
    # Every M takes the unpack path, ahead or in line as each pass asks.
    first = min(m_values)
    base = replace(
        configure_overlay(None), small_m_max=0, large_m_min=first, unpack_ahead_min_m=first
    )
    stack = build_stack(decoder_layers, generator)
    log(
        f"{torch.cuda.get_device_name()}: {len(stack)} dense layers ({decoder_layers} x "
        f"{'+'.join(LAYER_SHAPES)}), 128x128 block scales, {step} step"
        + ("" if link_gbs is None else f", all-reduce stand-in at {link_gbs:g} GB/s")
    )
    shapes = [s for s, _ in stack]
    rows: list[dict[str, object]] = []
    result: dict[str, object] = {}
    first_shape, first_weights = stack[0]
    probe = torch.randn(first, first_shape.k, device="cuda", generator=generator)
    host_calls = host_call_us(first_shape, first_weights, probe.to(torch.bfloat16))
    log("  host us per call, alone: " + ", ".join(f"{k} {v:.1f}" for k, v in host_calls.items()))
    for m in m_values:
        inputs = [
            torch.randn(m, s.k, device="cuda", generator=generator).to(torch.bfloat16)
            for s, _ in stack
        ]
        work_after = (
            step_work.decoder_work(shapes, m, link_gbs, generator, torch.device("cuda"))
            if step == "decoder"
            else {}
        )
        passes = make_passes(stack, inputs, base, work_after)
        check_same_outputs(passes)
        times = median_pass_us(passes, budget_s, timing)
        medians, host = times.device_us, times.host_us
        rows.extend(
            {
                "m": m,
                "path": p,
                "median_us": us,
                "host_us": host[p],
                "sm_clock_mhz": times.sm_clock_mhz[p],
            }
            for p, us in medians.items()
        )
        ratios = "  ".join(
            f"{p} {us / medians['bf16']:.3f}x (host {host[p]:.0f})" for p, us in medians.items()
        )
        log(f"  M={m:<6d} bf16 {medians['bf16']:9.1f} us/pass   {ratios}")
        device = torch.device("cuda", torch.cuda.current_device())
        stats = ahead.for_device(device).stats
        result = {
            "gpu": torch.cuda.get_device_name(),
            "layers": [{"name": s.name, "n": s.n, "k": s.k} for s, _ in stack],
            "block_scales": [128, 128],
            "timing": timing,
            "step": step,
            "link_gbs": link_gbs,
            "rows": rows,
            "scratch_bytes": {
                "plain": 2 * scratch.capacity(device, scratch.PLAIN_SLOT),
                "ahead": 2 * sum(scratch.capacity(device, s) for s in scratch.AHEAD_SLOTS),
                "ahead_slot": 2 * max(scratch.capacity(device, s) for s in scratch.AHEAD_SLOTS),
            },
            "ahead_calls": {"hits": stats.hits, "misses": stats.misses},
            "default_ahead_depth": settings.DEFAULT_UNPACK_AHEAD_DEPTH,
            "host_call_us": {"shape": first_shape.name, "m": first, **host_calls},
        }
        out.write_text(json.dumps(result, indent=1) + "\n")
        del inputs, passes, work_after
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench_model.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results file")
    parser.add_argument("--marlin-lib", help="Marlin library from tools/marlin/build.py")
    parser.add_argument("--decoder-layers", type=int, default=4, help="decoder layers stacked")
    parser.add_argument("--m", help="comma-separated M values (default: 512..8192)")
    parser.add_argument("--budget-s", type=float, default=0.5, help="timed seconds per path")
    parser.add_argument(
        "--timing",
        choices=TIMINGS,
        default="isolated",
        help="each pass from an idle GPU (default), or passes queued back to back",
    )
    parser.add_argument(
        "--step",
        choices=STEPS,
        default="dense",
        help="the dense layers alone (default), or with each decoder layer's other work",
    )
    parser.add_argument(
        "--link-gbs",
        type=float,
        help="decoder step: TP2 all-reduce bus bandwidth in GB/s, for a stand-in wait after "
        "o_proj and after the shared expert (default: no wait)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.decoder_layers < 1:
        raise SystemExit("--decoder-layers must be at least 1")
    if args.link_gbs is not None and (args.step != "decoder" or args.link_gbs <= 0):
        raise SystemExit("--link-gbs needs --step decoder and a positive bandwidth")
    try:
        m_values = [int(m) for m in args.m.split(",")] if args.m else list(M_VALUES)
    except ValueError:
        raise SystemExit(f"--m takes comma-separated whole numbers, got {args.m!r}") from None
    if min(m_values) < 1:
        raise SystemExit("--m values must be at least 1")
    require_gpu_and_marlin(args.marlin_lib, "the model-level benchmark")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run(
        args.decoder_layers,
        m_values,
        args.budget_s,
        args.out,
        args.timing,
        args.step,
        args.link_gbs,
    )
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
