"""Energy of a pass of the model benchmark's dense stack, path by path, on one GPU at its power
limit: how much of the unpack's cost no schedule can hide while the GPU is held at that limit.

    export VLLM_DUALPATH_MARLIN_LIB=build/marlin/libvllm_marlin_fp8.so
    export PYTHONPATH=files/vllm_dualpath/src:files/vllm_dualpath/benchmarks
    python3 research/power_floor.py \\
        --out OUT/power-floor.json --png OUT/power-floor.png

Needs a CUDA GPU, NVML (the nvidia-ml-py package) and the Marlin library. ``--fused`` (Hopper)
and ``--l2-chunk-mib`` add paths (``fused_warp_specialized``, ``unpack_l2_chunks``). Method,
paths and the floor (``floors``): research/results/power-floor-h200.md, power-floor-h100.md.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import bench_model
import fused_gemm_bench
import model_report
import result_cli
import torch
import triton
from vllm_dualpath import settings, timing, unpack
from vllm_dualpath.calibrate import configure_overlay, log, require_gpu_and_marlin

TOOL = "power_floor"
M_VALUES = (1024, 2048, 4096, 8192)
AHEAD = model_report.path_of_depth(settings.DEFAULT_UNPACK_AHEAD_DEPTH)
OP_PATHS = ("bf16", "unpack_cublas", AHEAD, model_report.SLOT_FREE)
UNPACK_ONLY = "unpack_only"
FUSED = "fused_warp_specialized"
L2_CHUNKS = "unpack_l2_chunks"
CHUNK_ALIGN = 256  # channels: whole Marlin tiles, scale blocks and cuBLAS tiles
SAMPLE_S = 0.01
IDLE_S = 1.0
COUNTER_PROBE_S = 0.5
PATH_COLORS = {
    "bf16": "black",
    UNPACK_ONLY: "tab:brown",
    FUSED: "tab:pink",
    L2_CHUNKS: "tab:olive",
}
# NVML clock-limit reason bits (nvmlClocksEventReason*)
REASONS = {"power_cap": 0x4, "hw_slowdown": 0x8 | 0x80, "thermal": 0x20 | 0x40}

Pass = Callable[[], object]
Linear = fused_gemm_bench.Linear


def load_nvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise SystemExit(f"{TOOL} needs NVML: pip install nvidia-ml-py") from None
    pynvml.nvmlInit()
    return pynvml


@dataclass
class Gauge:
    """NVML readings of the current GPU."""

    nvml: Any
    handle: Any = field(init=False)
    reasons: Callable[[Any], int] = field(init=False)

    def __post_init__(self) -> None:
        self.handle = self.nvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        # the newer name, or the older one (nvidia-ml-py before 12.535)
        reasons = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        self.reasons = reasons or self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def energy_j(self) -> float:
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)) / 1e3

    def limit_w(self) -> float:
        return float(self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle)) / 1e3

    def sample(self) -> tuple[float, int, float]:
        """SM clock (MHz), clock-limit reasons (bits), temperature (C)."""
        nvml, handle = self.nvml, self.handle
        return (
            float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            int(self.reasons(handle)),
            float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        )


def idle_power_w(gauge: Gauge) -> float:
    """The GPU's power while it idles, logged beside its power limit."""
    torch.cuda.synchronize()
    time.sleep(0.2)
    before, start = gauge.energy_j(), time.perf_counter()
    time.sleep(IDLE_S)
    idle_w = (gauge.energy_j() - before) / (time.perf_counter() - start)
    log(f"{torch.cuda.get_device_name()}: power limit {gauge.limit_w():.0f} W, idle {idle_w:.0f} W")
    return idle_w


def measure(gauge: Gauge, run: Pass, passes: int) -> dict[str, float]:
    """One window of ``passes`` passes queued back to back: device seconds, joules (the energy
    counter read on either side of it, with the GPU idle), host seconds per pass, and the share
    of samples with each clock-limit reason. The samples are taken between passes as they are
    issued, every SAMPLE_S at most, while the GPU runs earlier passes of the same window."""
    torch.cuda.synchronize()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples: list[tuple[float, int, float]] = []
    before = gauge.energy_j()
    first.record()
    issued = next_sample = time.perf_counter()
    for _ in range(passes):
        run()
        now = time.perf_counter()
        if now >= next_sample:
            samples.append(gauge.sample())
            next_sample = now + SAMPLE_S
    host_s = time.perf_counter() - issued
    last.record()
    last.synchronize()
    joules = gauge.energy_j() - before
    row = {
        "passes": passes,
        "device_s": first.elapsed_time(last) / 1e3,
        "energy_j": joules,
        "host_s_per_pass": host_s / passes,
        "sm_clock_mhz": statistics.median(s[0] for s in samples),
        "temperature_c": statistics.median(s[2] for s in samples),
    }
    for name, bits in REASONS.items():
        row[f"{name}_share"] = sum(1 for s in samples if s[1] & bits) / len(samples)
    return row


def counter_step_s(gauge: Gauge, run: Pass) -> float:
    """How often NVML's energy counter moves while the GPU works (median seconds between
    changes): the error of a window's energy is about one step's worth."""
    changes = []
    last_value = gauge.energy_j()
    end = time.perf_counter() + COUNTER_PROBE_S
    while time.perf_counter() < end:
        run()
        value = gauge.energy_j()
        if value != last_value:
            changes.append(time.perf_counter())
            last_value = value
    torch.cuda.synchronize()
    gaps = [b - a for a, b in itertools.pairwise(changes)]
    return statistics.median(gaps) if gaps else COUNTER_PROBE_S


def passes_for(run: Pass, window_s: float) -> int:
    """Passes that fill about ``window_s`` seconds, from three timed back to back."""
    return max(3, round(window_s / timing.time_eager_s([run] * 3)))


def floors(rows: dict[str, dict[str, float]], limit_w: float, idle_w: float) -> dict[str, float]:
    """Least time / BF16's for BF16's work plus the unpacks', spent at the power limit.

    ``fixed_clock``: (E_bf16 + E_unpack) / (P_limit - P_idle), dynamic energies as measured and
    the idle power for the static one, over BF16's time. ``scaled_clock``: the GEMMs' clock
    lowered to make room, their dynamic power going as clock cubed (voltage following clock);
    the unpacks' energy (memory traffic) stays. The truth lies between."""
    bf16, unpacks = rows["bf16"], rows[UNPACK_ONLY]
    seconds = bf16["us_per_pass"] / 1e6
    budget = limit_w - idle_w  # dynamic power the limit allows
    gemm_w = bf16["mean_power_w"] - idle_w  # dynamic power of BF16's passes
    unpack_j = unpacks["j_per_pass"] - idle_w * unpacks["us_per_pass"] / 1e6
    fixed = (gemm_w * seconds + unpack_j) / budget / seconds
    # x = time / BF16's: the GEMMs get budget - unpack_j / (x seconds) and run at
    # (that / gemm_w) ** (1/3) of BF16's speed, so budget x**3 - (unpack_j / seconds) x**2 = gemm_w.
    share = unpack_j / seconds
    low, high = 0.5, 4.0
    for _ in range(60):
        x = (low + high) / 2
        low, high = (x, high) if budget * x**3 - share * x**2 < gemm_w else (low, x)
    return {"fixed_clock": fixed, "scaled_clock": (low + high) / 2}


def summarize(windows: list[dict[str, float]]) -> dict[str, float]:
    """Totals over a path's windows: time and energy per pass, mean power, medians of the rest."""
    passes = sum(w["passes"] for w in windows)
    seconds = sum(w["device_s"] for w in windows)
    joules = sum(w["energy_j"] for w in windows)
    row = {
        "us_per_pass": seconds / passes * 1e6,
        "j_per_pass": joules / passes,
        "mean_power_w": joules / seconds,
        "host_us_per_pass": statistics.median(w["host_s_per_pass"] for w in windows) * 1e6,
    }
    for key in ("sm_clock_mhz", "temperature_c", *(f"{n}_share" for n in REASONS)):
        row[key] = statistics.median(w[key] for w in windows)
    return row


def measure_paths(
    gauge: Gauge, runs: dict[str, Pass], m: int, window_s: float, turns: int
) -> dict[str, Any]:
    """Each run warmed up, then timed in ``turns`` windows of about ``window_s`` seconds, the runs
    in turns: ``paths`` (each run's summary) and ``windows`` (every window)."""
    for run in runs.values():
        for _ in range(bench_model.WARMUP_PASSES):
            run()
    counts = {name: passes_for(run, window_s) for name, run in runs.items()}
    windows: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    for turn in range(turns):
        for name, run in runs.items():
            windows[name].append(measure(gauge, run, counts[name]))
        log(f"  M={m} turn {turn + 1}/{turns} done")
    return {"paths": {name: summarize(w) for name, w in windows.items()}, "windows": windows}


def ratios_line(paths: dict[str, dict[str, float]]) -> str:
    """Each path's time and energy / BF16's and its mean power, for the progress log."""
    bf16 = paths["bf16"]
    return "  ".join(
        f"{name} {p['us_per_pass'] / bf16['us_per_pass']:.3f}x time "
        f"{p['j_per_pass'] / bf16['j_per_pass']:.3f}x energy {p['mean_power_w']:.0f} W"
        for name, p in paths.items()
    )


def result_header(
    tool: str, argv: Sequence[str], gauge: Gauge, idle_w: float, window_s: float, turns: int
) -> dict[str, Any]:
    """What each result of a power-limit tool starts with: command, machine, settings."""
    return {
        "command": " ".join([f"python3 research/{tool}.py", *argv]),
        "device": torch.cuda.get_device_name(),
        "driver": gauge.nvml.nvmlSystemGetDriverVersion(),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "triton": triton.__version__,
        },
        "power_limit_w": gauge.limit_w(),
        "idle_power_w": idle_w,
        "window_s": window_s,
        "turns": turns,
    }


Chunk = tuple[int, int, torch.Tensor, torch.Tensor]  # first, end channel, Marlin words, scales


def chunk_channels(k: int, chunk_mib: float) -> int:
    """Channels per slice: whole CHUNK_ALIGN tiles whose BF16 rows fit ``chunk_mib``."""
    rows = int(chunk_mib * 2**20) // (2 * k)
    return max(CHUNK_ALIGN, rows // CHUNK_ALIGN * CHUNK_ALIGN)


def split_weight(packed: torch.Tensor, scales: torch.Tensor, n: int, channels: int) -> list[Chunk]:
    """A Marlin FP8 weight as slices of ``channels`` output channels, each a Marlin weight of
    its own. A 64-channel tile column is 256 consecutive words of every tile row, and the scales'
    permutation stays inside 64 channels, so a slice is a column range of both (needs N and
    ``channels`` to be whole tiles)."""
    if n % CHUNK_ALIGN or channels % CHUNK_ALIGN:
        raise ValueError(f"slices need whole {CHUNK_ALIGN}-channel tiles: N={n}, {channels}")
    chunks = []
    for first in range(0, n, channels):
        end = min(n, first + channels)
        words = packed[:, 4 * first : 4 * end].contiguous()
        chunks.append((first, end, words, scales[:, first:end].contiguous()))
    return chunks


def chunked_linear(
    x: torch.Tensor, chunks: list[Chunk], n: int, buffer: torch.Tensor
) -> torch.Tensor:
    """x @ W^T, W unpacked one slice at a time into ``buffer`` with cuBLAS after each slice;
    the output is Y^T's transpose (a view), so each slice's rows land without a copy."""
    out_t = torch.empty(n, x.shape[0], dtype=torch.bfloat16, device=x.device)
    for first, end, words, scales in chunks:
        weight = unpack.unpack_weight(words, scales, end - first, x.shape[1], out=buffer)
        torch.mm(weight, x.t(), out=out_t[first:end])
    return out_t.t()


def extra_kernels(stack: list, fused: bool, chunk_mib: float | None) -> dict[str, Linear]:
    """The paths asked for beside the op's, each a Linear over the stack's Marlin weights; the
    slices of ``--l2-chunk-mib`` are cut once, here, for every M."""
    kernels: dict[str, Linear] = {}
    if fused:
        import warp_specialized_gemm  # Gluon, Hopper only: imported only when asked for

        kernels[FUSED] = warp_specialized_gemm.warp_specialized_linear
    if chunk_mib is not None:
        slices = {
            w.marlin.qweight.data_ptr(): split_weight(
                w.marlin.qweight, w.marlin.scales, s.n, chunk_channels(s.k, chunk_mib)
            )
            for s, w in stack
        }
        buffer = torch.empty(
            max(chunk_channels(s.k, chunk_mib) * s.k for s, _ in stack),
            dtype=torch.bfloat16,
            device="cuda",
        )

        def l2_chunks(
            x: torch.Tensor, packed: torch.Tensor, _scales: torch.Tensor, n: int, _k: int
        ) -> torch.Tensor:
            return chunked_linear(x, slices[packed.data_ptr()], n, buffer)

        kernels[L2_CHUNKS] = l2_chunks
    return kernels


def check_accuracy(stack: list, g: torch.Generator, kernels: dict[str, Linear]) -> list[dict]:
    """Each kernel against FP32 on each layer shape, as the fused probes check theirs (exits
    non-zero when one is off)."""
    probe = fused_gemm_bench.Probe(tool=TOOL, kernels=kernels, configs=[])
    return fused_gemm_bench.check_accuracy(probe, stack, g)


def measure_m(
    gauge: Gauge,
    stack: list,
    m: int,
    window_s: float,
    turns: int,
    g: torch.Generator,
    kernels: dict[str, Linear],
) -> dict[str, Any]:
    base = replace(configure_overlay(None), small_m_max=0, large_m_min=m, unpack_ahead_min_m=m)
    inputs = [torch.randn(m, s.k, device="cuda", generator=g).to(torch.bfloat16) for s, _ in stack]
    every = bench_model.make_passes(stack, inputs, base)
    bench_model.check_same_outputs(every)
    buffer = torch.empty(max(s.n * s.k for s, _ in stack), dtype=torch.bfloat16, device="cuda")

    def unpack_only() -> list[torch.Tensor]:
        return [
            unpack.unpack_weight(w.marlin.qweight, w.marlin.scales, s.n, s.k, out=buffer)
            for s, w in stack
        ]

    runs: dict[str, Pass] = {name: every[name] for name in OP_PATHS} | {UNPACK_ONLY: unpack_only}
    layers = list(zip(stack, inputs, strict=True))
    for name, linear in kernels.items():

        def through(linear: Linear = linear) -> list[torch.Tensor]:
            return [linear(x, w.marlin.qweight, w.marlin.scales, s.n, s.k) for (s, w), x in layers]

        runs[name] = through
    step_s = counter_step_s(gauge, runs["bf16"])
    return {"m": m, "energy_counter_step_s": step_s} | measure_paths(
        gauge, runs, m, window_s, turns
    )


def run(
    m_values: Sequence[int],
    window_s: float,
    turns: int,
    fused: bool,
    chunk_mib: float | None,
    argv: Sequence[str],
) -> dict:
    gauge = Gauge(load_nvml())
    g = torch.Generator(device="cuda")
    g.manual_seed(1)
    stack = bench_model.build_stack(4, g)
    kernels = extra_kernels(stack, fused, chunk_mib)
    accuracy = check_accuracy(stack, g, kernels) if kernels else None
    idle_w = idle_power_w(gauge)
    limit_w = gauge.limit_w()
    rows = []
    for m in m_values:
        row = measure_m(gauge, stack, m, window_s, turns, g, kernels)
        both = floors(row["paths"], limit_w, idle_w)
        row["floor"] = both["fixed_clock"]
        log(
            f"  M={m}: floor {both['fixed_clock']:.3f}x "
            f"(clock scaled {both['scaled_clock']:.3f}x)  " + ratios_line(row["paths"])
        )
        rows.append(row)
    return (
        result_header(TOOL, argv, gauge, idle_w, window_s, turns)
        | {
            "default_ahead_depth": settings.DEFAULT_UNPACK_AHEAD_DEPTH,
            "rows": rows,
            "l2_chunk_mib": chunk_mib,
        }
        | ({"accuracy": accuracy} if accuracy is not None else {})
    )


def plot_figure() -> tuple[Any, Any, Any]:
    """A figure with a ratio axis (left) and a power axis (right), drawn off-screen."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ratio_axis, power_axis) = plt.subplots(1, 2, figsize=(11, 4))
    return fig, ratio_axis, power_axis


def draw_ratios(axis: Any, rows: list[dict], names: Sequence[str], colors: dict[str, str]) -> None:
    """Each path's time (solid) and energy (dashed) per pass / BF16's, over M."""
    ms = [row["m"] for row in rows]
    for name in names:
        pairs = [(r["paths"][name], r["paths"]["bf16"]) for r in rows]
        times = [p["us_per_pass"] / b["us_per_pass"] for p, b in pairs]
        joules = [p["j_per_pass"] / b["j_per_pass"] for p, b in pairs]
        axis.plot(ms, times, marker="o", color=colors[name], label=f"{name}: time")
        axis.plot(ms, joules, marker="x", linestyle="--", color=colors[name], label="  energy")
    model_report.draw_targets(axis, ms)
    axis.set_title("dense stack: per pass / BF16")


def finish_plot(
    fig: Any, power_axis: Any, result: dict, colors: dict[str, str], title: str, png: str
) -> None:
    """The power axis (each path's mean power, the limit and the idle power), M on both axes."""
    rows = result["rows"]
    ms = [row["m"] for row in rows]
    for name in rows[0]["paths"]:
        power = [r["paths"][name]["mean_power_w"] for r in rows]
        power_axis.plot(ms, power, marker="o", color=colors[name], label=name)
    power_axis.axhline(result["power_limit_w"], color="red", linestyle=":", label="power limit")
    power_axis.axhline(result["idle_power_w"], color="grey", linestyle=":", label="idle")
    power_axis.set_title("mean power while the passes ran (W)")
    for axis in fig.axes:
        axis.set_xscale("log", base=2)
        axis.set_xticks(ms, [str(m) for m in ms])
        axis.set_xlabel("M (tokens)")
        axis.legend(fontsize=7)
    fig.suptitle(f"{result['device']}, dense step: {title}")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def plot(result: dict, png: str) -> None:
    rows = result["rows"]
    names = list(rows[0]["paths"])
    colors = {name: PATH_COLORS.get(name) or model_report.COLORS[name] for name in names}
    fig, ratio_axis, power_axis = plot_figure()
    draw_ratios(ratio_axis, rows, [n for n in names if n not in ("bf16", UNPACK_ONLY)], colors)
    limits = [floors(r["paths"], result["power_limit_w"], result["idle_power_w"]) for r in rows]
    for kind, style in (("fixed_clock", "-"), ("scaled_clock", "--")):
        ratio_axis.plot(
            [row["m"] for row in rows],
            [f[kind] for f in limits],
            color="black",
            linestyle=style,
            label=f"floor, {kind.replace('_', ' ')}",
        )
    finish_plot(fig, power_axis, result, colors, "energy per pass and the power floor", png)


def window_parser(description: str) -> argparse.ArgumentParser:
    """The shared command line with the window settings: --m, --window-s, --turns."""
    parser = result_cli.parser(description)
    parser.add_argument("--m", default=",".join(map(str, M_VALUES)), help="comma-separated M")
    parser.add_argument("--window-s", type=float, default=3.0, help="seconds per window")
    parser.add_argument("--turns", type=int, default=3, help="windows per path")
    return parser


def m_values_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """--m as numbers, once every window setting is checked (the parser exits on a bad one)."""
    try:
        m_values = [int(m) for m in args.m.split(",")]
    except ValueError:
        parser.error(f"--m takes comma-separated whole numbers, got {args.m!r}")
    if min(m_values) < 1 or args.window_s <= 0 or args.turns < 1:
        parser.error("--m values, --window-s and --turns must be positive")
    return m_values


def main(argv: Sequence[str] | None = None) -> int:
    parser = window_parser(__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fused",
        action="store_true",
        help="also run the warp-specialized fused GEMM (warp_specialized_gemm.py; Hopper)",
    )
    parser.add_argument(
        "--l2-chunk-mib",
        type=float,
        help="also unpack each weight in slices of about this many MiB, cuBLAS after each",
    )
    args = parser.parse_args(argv)
    if result_cli.replotted(parser, args, plot):
        return 0
    m_values = m_values_of(parser, args)
    if args.l2_chunk_mib is not None and args.l2_chunk_mib <= 0:
        parser.error("--l2-chunk-mib must be positive")
    require_gpu_and_marlin(None, TOOL)
    arguments = list(sys.argv[1:] if argv is None else argv)
    result = run(m_values, args.window_s, args.turns, args.fused, args.l2_chunk_mib, arguments)
    result_cli.save(args, result, plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
