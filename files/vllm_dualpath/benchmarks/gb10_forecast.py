"""What the dual path should do on a DGX Spark (GB10): per dense layer, and for the served model.

    python files/vllm_dualpath/benchmarks/gb10_forecast.py --json gb10_forecast.json

A roofline per call, time = max(bytes / (e_bw x bandwidth), flops / (e_tc x BF16 peak)) + a fixed
time, with each kernel's efficiencies fitted to the H200 medians of docs/perf/dualpath-h200.json
and the GB10's published peaks. The served model's FP8 dense layers are what
vllm_dualpath.model_shapes derives for one TP2 rank from glm53_flash.json (beside this script):
its MLPs and LM head, vLLM building GLM-5-Next's attention in BF16. Everything else (routed
experts, the BF16 attention, the rail) is one constant per phase, fitted to the reference
deployment's all-BF16 row, so its FP8 rows are predictions. Pure arithmetic: no torch, no GPU.
The model, its sources and its limits: docs/perf/gb10-forecast.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

try:
    from vllm_dualpath.model_shapes import rank_shapes
except ImportError:  # run from a checkout without the package installed: its sources are beside
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from vllm_dualpath.model_shapes import rank_shapes

H200_RESULT = Path(__file__).resolve().parents[3] / "docs" / "perf" / "dualpath-h200.json"
COMMAND = "python files/vllm_dualpath/benchmarks/gb10_forecast.py"


@dataclass(frozen=True)
class Gpu:
    """Published peaks: memory bandwidth (bytes/s) and dense BF16 tensor throughput (FLOP/s)."""

    name: str
    bandwidth: float
    bf16_flops: float


# GB10's BF16 peak: NVIDIA's 1 PFLOP of FP4 with 2:4 sparsity, halved for dense, FP8 and BF16.
GB10 = Gpu("GB10", 273e9, 1e15 / 8)
H200 = Gpu("H200", 4.8e12, 989e12)
H100 = Gpu("H100", 3.35e12, 989e12)


@dataclass(frozen=True)
class Kernel:
    """What a kernel reaches: fractions of the two peaks, and a fixed time per call (seconds)."""

    bandwidth: float
    compute: float
    fixed_s: float


@dataclass(frozen=True)
class Efficiencies:
    bf16: Kernel  # cuBLAS on a BF16 weight
    marlin: Kernel  # Marlin W8A16
    unpack: Kernel  # the unpack alone: memory traffic, no tensor work


# calibrate.SHAPES (a GLM-4.5/4.6-class TP2 rank: the shapes the H200 measured), restated so
# that this script imports no torch.
SHAPES = (
    (7168, 5120),
    (5120, 6144),
    (1536, 5120),
    (5120, 768),
    (12288, 5120),
    (75776, 5120),
    (2880, 2880),
    (4100, 5120),
)
SMALL_M_MAX = 20  # the op takes Marlin up to here whatever the calibration says
LARGEST_M = 16384  # the largest M the H200 measured: crossovers are sought up to it
FIT_LARGE_M = (4096, 8192, 16384)
PER_LAYER_M = (1, 16, 64, 256, 1024, 4096, 8192)
PATHS = ("bf16", "marlin", "unpack_cublas", "dualpath")
CONFIGURATIONS = {"bf16": "bf16", "fp8_marlin": "marlin", "dualpath": "dualpath"}


def gemm_s(gpu: Gpu, kernel: Kernel, m: int, n: int, k: int, weight_bytes: int) -> float:
    """One [M, K] x [K, N] product: moving the weight and the BF16 activations in and out, or
    the tensor work, whichever takes longer, plus the kernel's fixed time."""
    traffic = weight_bytes * n * k + 2 * m * (k + n)
    memory = traffic / (kernel.bandwidth * gpu.bandwidth)
    return max(memory, 2 * m * n * k / (kernel.compute * gpu.bf16_flops)) + kernel.fixed_s


def path_times(gpu: Gpu, eff: Efficiencies, m: int, n: int, k: int) -> dict[str, float]:
    """Seconds per call: BF16, Marlin (1 byte per weight), and the unpack (reads 1 byte per
    weight, writes 2) followed by the BF16 product."""
    bf16 = gemm_s(gpu, eff.bf16, m, n, k, 2)
    unpack = 3 * n * k / (eff.unpack.bandwidth * gpu.bandwidth) + eff.unpack.fixed_s
    return {
        "bf16": bf16,
        "marlin": gemm_s(gpu, eff.marlin, m, n, k, 1),
        "unpack_cublas": unpack + bf16,
    }


@functools.cache
def crossover(gpu: Gpu, eff: Efficiencies, n: int, k: int) -> int | None:
    """The smallest M at which unpack + cuBLAS is no slower than Marlin (None: not even at
    LARGEST_M), by bisection: in this model Marlin's lead only shrinks as M grows (the tests
    check that on every shape)."""

    def unpack_wins(m: int) -> bool:
        times = path_times(gpu, eff, m, n, k)
        return times["unpack_cublas"] <= times["marlin"]

    if not unpack_wins(LARGEST_M):
        return None
    loses, wins = 0, LARGEST_M
    while wins - loses > 1:
        mid = (loses + wins) // 2
        loses, wins = (loses, mid) if unpack_wins(mid) else (mid, wins)
    return wins


def path_s(gpu: Gpu, eff: Efficiencies, m: int, n: int, k: int) -> dict[str, float]:
    """path_times plus the dual path: Marlin up to SMALL_M_MAX and below the crossover (what a
    calibration table measured on this GPU would say), unpack + cuBLAS from it."""
    times = path_times(gpu, eff, m, n, k)
    from_m = crossover(gpu, eff, n, k)
    unpacks = m > SMALL_M_MAX and from_m is not None and m >= from_m
    return {**times, "dualpath": times["unpack_cublas" if unpacks else "marlin"]}


def fit(result: dict[str, Any], gpu: Gpu = H200) -> Efficiencies:
    """Efficiencies from a bench.py result. Bandwidth and fixed time: a least-squares line
    through each path's times at M = 1 against its bytes, over all shapes (the unpack's time is
    unpack + cuBLAS less BF16). Tensor efficiency: the median over shapes and M >= 4096 of
    flops / ((time - fixed time) x peak)."""
    times = {(r["n"], r["k"], r["m"], r["path"]): r["median_us"] * 1e-6 for r in result["rows"]}
    shapes = sorted({(n, k) for n, k, _, _ in times})

    def line(points: list[tuple[float, float]]) -> tuple[float, float]:
        slope, intercept = statistics.linear_regression(*zip(*points, strict=True))
        return 1 / (slope * gpu.bandwidth), max(0.0, intercept)

    kernels = []
    for path, weight_bytes in (("bf16", 2), ("marlin", 1)):
        at_1 = [(weight_bytes * n * k + 2 * (n + k), times[n, k, 1, path]) for n, k in shapes]
        bandwidth, fixed_s = line(at_1)
        compute = statistics.median(
            2 * m * n * k / ((times[n, k, m, path] - fixed_s) * gpu.bf16_flops)
            for n, k in shapes
            for m in FIT_LARGE_M
        )
        kernels.append(Kernel(bandwidth, compute, fixed_s))
    unpack = [
        (3 * n * k, times[n, k, 1, "unpack_cublas"] - times[n, k, 1, "bf16"]) for n, k in shapes
    ]
    bandwidth, fixed_s = line(unpack)
    return Efficiencies(*kernels, Kernel(bandwidth, 0.0, fixed_s))


@dataclass(frozen=True)
class Layer:
    """A dense FP8 layer of one TP2 rank: output features N, input features K, calls per pass."""

    name: str
    n: int
    k: int
    calls: int = 1


# The served model, GLM-5.3-Flash: its config.json's fields that decide the dense shapes and how
# often each runs (tests/model_configs.py reads the same file).
SERVED_CONFIG_FILE = Path(__file__).resolve().with_name("glm53_flash.json")
SERVED_CONFIG: dict[str, Any] = json.loads(SERVED_CONFIG_FILE.read_text(encoding="utf-8"))
TENSOR_PARALLEL = 2
MLP_KINDS = {"dense": "dense", "sparse": "shared"}  # mlp_layer_types entry -> model_shapes' prefix


@dataclass(frozen=True)
class Inventory:
    """The FP8 dense layers of one rank: the trunk's, the MTP block's, and the LM head."""

    trunk: tuple[Layer, ...]
    mtp_block: tuple[Layer, ...]
    lm_head: Layer


def inventory(config: dict[str, Any], tensor_parallel_size: int) -> Inventory:
    """model_shapes.rank_shapes' layers, each counted over the layers that run it: a dense MLP in
    each layer whose mlp_layer_types entry is "dense", a shared expert in each "sparse" one, and
    the MTP layers (num_nextn_predict_layers) with the last entry's MLP, as vLLM builds them. Only
    MLPs and the LM head are counted: a shape of anything else (attention that vLLM quantizes) is
    refused, as this forecast takes attention to be BF16 in every configuration."""
    types = config.get("mlp_layer_types")
    if not isinstance(types, list) or not types or not set(types) <= set(MLP_KINDS):
        raise ValueError(f"mlp_layer_types must list {sorted(MLP_KINDS)} per layer: {types!r}")
    if config.get("num_hidden_layers", len(types)) != len(types):
        raise ValueError("mlp_layer_types does not list one entry per hidden layer")
    trunk_count = {MLP_KINDS[kind]: types.count(kind) for kind in MLP_KINDS}
    mtp_count = {prefix: 0 for prefix in MLP_KINDS.values()}
    mtp_count[MLP_KINDS[types[-1]]] = config.get("num_nextn_predict_layers") or 0
    shapes = rank_shapes(config, tensor_parallel_size)
    # rank_shapes lists each shape once: an MLP whose shape another layer has would go uncounted
    shared = config.get("n_shared_experts") or config.get("shared_expert_intermediate_size")
    expected = {
        f"{prefix}_{part}"
        for prefix in MLP_KINDS.values()
        if trunk_count[prefix] + mtp_count[prefix] and (prefix == "dense" or shared)
        for part in ("gate_up", "down")
    }
    missing = expected - {shape.name for shape in shapes}
    if missing:
        raise ValueError(f"{', '.join(sorted(missing))}: shares its shape with another layer")
    trunk: list[Layer] = []
    mtp: list[Layer] = []
    lm_head = None
    for shape in shapes:
        if shape.name == "lm_head":
            lm_head = Layer(shape.name, shape.n, shape.k)
            continue
        prefix, _, part = shape.name.partition("_")
        if prefix not in trunk_count or part not in ("gate_up", "down"):
            raise ValueError(
                f"{shape.name} {shape.key}: not an MLP or the LM head (attention in FP8 is not "
                "modelled here)"
            )
        if trunk_count[prefix]:
            trunk.append(Layer(shape.name, shape.n, shape.k, trunk_count[prefix]))
        if mtp_count[prefix]:
            mtp.append(Layer(f"mtp_{shape.name}", shape.n, shape.k, mtp_count[prefix]))
    if lm_head is None:
        raise ValueError("no LM head")
    return Inventory(tuple(trunk), tuple(mtp), lm_head)


SERVED = inventory(SERVED_CONFIG, TENSOR_PARALLEL)
TRUNK, MTP_BLOCK, LM_HEAD = SERVED.trunk, SERVED.mtp_block, SERVED.lm_head
SERVED_SHAPES = tuple(dict.fromkeys((layer.n, layer.k) for layer in (*TRUNK, LM_HEAD)))

# The reference deployment (ARCHITECTURE's seed table; roles/pair_benchmark's reference): per
# configuration, prefill tok/s at 12k and decode tok/s on prose; per case, (low, high).
REFERENCE = {"bf16": (1395.0, 25.6), "fp8_marlin": (1225.0, 36.2), "dualpath": (1341.0, 36.5)}
CASES = {
    "prefill_12k_warm": (1341.0, 1341.0),
    "decode_korean_prose": (36.5, 36.5),
    "decode_english_prose": (32.8, 36.1),
    "decode_code": (43.2, 43.2),
}
PREFILL_TOKENS = 12288
CHUNK = 8192  # max-num-batched-tokens: a 12k prompt runs as calls of 8192 and 4096
DRAFTS = 4  # MTP draft tokens: a decode step verifies 1 + 4 tokens
TOKENS_PER_STEP = 3.0  # tokens a step emits: the reference's ~82 ms step at its 36.5 tok/s

Calls = list[tuple[Layer, int]]


def prefill_calls() -> Calls:
    """Each chunk through the trunk and the MTP block, and the LM head on its last token."""
    chunks = [min(CHUNK, PREFILL_TOKENS - start) for start in range(0, PREFILL_TOKENS, CHUNK)]
    layers = (*TRUNK, *MTP_BLOCK)
    return [(layer, m) for m in chunks for layer in layers] + [(LM_HEAD, 1)] * len(chunks)


def decode_calls() -> Calls:
    """One step: the trunk and the LM head verify 1 + DRAFTS tokens, then the MTP block and the
    LM head draft the next ones a token at a time."""
    verify = [(layer, 1 + DRAFTS) for layer in (*TRUNK, LM_HEAD)]
    return verify + [(layer, 1) for layer in (*MTP_BLOCK, LM_HEAD)] * DRAFTS


def dense_s(gpu: Gpu, eff: Efficiencies, path: str, calls: Calls) -> float:
    return sum(layer.calls * path_s(gpu, eff, m, layer.n, layer.k)[path] for layer, m in calls)


@dataclass(frozen=True)
class Whole:
    """The served model's rates per configuration, and the fitted non-dense time per phase."""

    prefill_tok_s: dict[str, float]
    decode_tok_s: dict[str, float]
    other_prefill_s: float
    other_step_s: float


def whole_model(gpu: Gpu, eff: Efficiencies, tokens_per_step: float = TOKENS_PER_STEP) -> Whole:
    """Rates per configuration, with the non-dense time fitted to the reference's BF16 row."""
    dense = {
        c: (dense_s(gpu, eff, p, prefill_calls()), dense_s(gpu, eff, p, decode_calls()))
        for c, p in CONFIGURATIONS.items()
    }
    other_prefill = PREFILL_TOKENS / REFERENCE["bf16"][0] - dense["bf16"][0]
    other_step = tokens_per_step / REFERENCE["bf16"][1] - dense["bf16"][1]
    if other_prefill <= 0 or other_step <= 0:
        raise ValueError("the dense layers alone take longer than the reference's BF16 row")
    return Whole(
        {c: PREFILL_TOKENS / (d[0] + other_prefill) for c, d in dense.items()},
        {c: tokens_per_step / (d[1] + other_step) for c, d in dense.items()},
        other_prefill,
        other_step,
    )


def solve(f: Callable[[float], float], target: float, lo: float, hi: float) -> float | None:
    """x in [lo, hi] with f(x) = target for a monotonic f, by bisection; None if outside."""
    if (f(lo) - target) * (f(hi) - target) > 0:
        return None
    below_at_lo = f(lo) < target
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (f(mid) < target) == below_at_lo else (lo, mid)
    return (lo + hi) / 2


def band(gpu: Gpu, eff: Efficiencies, shapes: Sequence[tuple[int, int]]) -> list[int] | None:
    """The lowest and highest crossover over the shapes (None: Marlin wins on all of them)."""
    found = [m for m in (crossover(gpu, eff, n, k) for n, k in shapes) if m is not None]
    return [min(found), max(found)] if found else None


def implied(
    gpu: Gpu,
    eff: Efficiencies,
    tokens_per_step: float,
    shapes: Sequence[tuple[int, int]] = SERVED_SHAPES,
) -> dict[str, Any]:
    """What the FP8-only reference row asks of the model: Marlin's fraction of the BF16 peak
    (prefill) or the GB10 peak bandwidth (decode), everything else as fitted, and where each
    would put the crossover band over the shapes; empty where no value in range reproduces the
    row."""

    def with_marlin(compute: float) -> Efficiencies:
        return replace(eff, marlin=replace(eff.marlin, compute=compute))

    def prefill(compute: float) -> float:
        return whole_model(gpu, with_marlin(compute), tokens_per_step).prefill_tok_s["fp8_marlin"]

    def decode(bandwidth: float) -> float:
        try:
            slower = replace(gpu, bandwidth=bandwidth)
            return whole_model(slower, eff, tokens_per_step).decode_tok_s["fp8_marlin"]
        except ValueError:  # so slow that BF16 dense alone outlasts the BF16 row
            return float("inf")

    compute = solve(prefill, REFERENCE["fp8_marlin"][0], 0.02, 1.0)
    bandwidth = solve(decode, REFERENCE["fp8_marlin"][1], 20e9, 2 * gpu.bandwidth)
    if compute is None or bandwidth is None:
        return {}
    return {
        "marlin_of_bf16_peak": round(compute, 3),
        "crossover_band_at_that_marlin": band(gpu, with_marlin(compute), shapes),
        "bandwidth_gb_s": round(bandwidth / 1e9, 1),
        "crossover_band_at_that_bandwidth": band(replace(gpu, bandwidth=bandwidth), eff, shapes),
    }


def error_pct(predicted: float, low: float, high: float | None = None) -> float:
    """Error in percent against a figure, or against the middle of a (low, high) range."""
    return round(100 * (2 * predicted / (low + (low if high is None else high)) - 1), 1)


def per_layer_us(gpu: Gpu, eff: Efficiencies, shapes: Sequence[tuple[int, int]]) -> dict:
    return {
        f"{n}x{k}": {
            str(m): {p: round(t * 1e6, 2) for p, t in path_s(gpu, eff, m, n, k).items()}
            for m in PER_LAYER_M
        }
        for n, k in shapes
    }


def forecast(
    shapes: Sequence[tuple[int, int]],
    h200_result: dict[str, Any],
    tokens_per_step: float = TOKENS_PER_STEP,
    command: str = COMMAND,
    gpu: Gpu = GB10,
) -> dict[str, Any]:
    """Everything the script prints and writes, JSON-ready."""
    eff = fit(h200_result)
    whole = whole_model(gpu, eff, tokens_per_step)
    crossovers = {f"{n}x{k}": crossover(gpu, eff, n, k) for n, k in shapes}
    rates = {
        name: whole.prefill_tok_s["dualpath"]
        if "prefill" in name
        else whole.decode_tok_s["dualpath"]
        for name in CASES
    }
    h200_errors = [
        abs(path_s(H200, eff, r["m"], r["n"], r["k"])[r["path"]] / (r["median_us"] * 1e-6) - 1)
        for r in h200_result["rows"]
        if r["path"] != "dualpath"
    ]
    return {
        "gpu": gpu.name,
        "command": command,
        "cases": {name: {"tok_s": round(rate, 1)} for name, rate in rates.items()},
        "configurations": {
            c: {
                "prefill_12k_tok_s": round(whole.prefill_tok_s[c], 1),
                "decode_tok_s": round(whole.decode_tok_s[c], 1),
            }
            for c in CONFIGURATIONS
        },
        "crossover_m": crossovers,
        "crossover_band": band(gpu, eff, shapes),
        "error_vs_reference_pct": {
            "configurations": {
                c: {
                    "prefill_12k": error_pct(whole.prefill_tok_s[c], REFERENCE[c][0]),
                    "decode": error_pct(whole.decode_tok_s[c], REFERENCE[c][1]),
                }
                for c in ("fp8_marlin", "dualpath")
            },
            "cases": {name: error_pct(rates[name], *CASES[name]) for name in CASES},
        },
        "reference": {
            "configurations": {
                c: {"prefill_12k_tok_s": p, "decode_tok_s": d} for c, (p, d) in REFERENCE.items()
            },
            "cases": {name: list(low_high) for name, low_high in CASES.items()},
            "fitted_to": "bf16",
        },
        "inputs": {
            "gpu": {"bandwidth_gb_s": gpu.bandwidth / 1e9, "bf16_tflops": gpu.bf16_flops / 1e12},
            "efficiencies_from_h200": {
                name: {
                    "of_bandwidth": round(kernel.bandwidth, 4),
                    "of_bf16_peak": round(kernel.compute, 4),
                    "fixed_us": round(kernel.fixed_s * 1e6, 2),
                }
                for name, kernel in zip(
                    ("bf16", "marlin", "unpack"), (eff.bf16, eff.marlin, eff.unpack), strict=True
                )
            },
            "h200_abs_error_pct": {
                "median": round(100 * statistics.median(h200_errors), 1),
                "p90": round(100 * statistics.quantiles(h200_errors, n=10)[-1], 1),
            },
            "prefill_tokens": PREFILL_TOKENS,
            "chunk": CHUNK,
            "draft_tokens": DRAFTS,
            "tokens_per_step": tokens_per_step,
        },
        "non_dense_s": {
            "prefill_12k": round(whole.other_prefill_s, 4),
            "decode_step": round(whole.other_step_s, 5),
        },
        "implied_by_fp8_reference": implied(gpu, eff, tokens_per_step),
        "h200_crossover_m": {f"{n}x{k}": crossover(H200, eff, n, k) for n, k in shapes},
        "served_layers": {
            layer.name: {"shape": f"{layer.n}x{layer.k}", "calls_per_pass": layer.calls}
            for layer in (*TRUNK, *MTP_BLOCK, LM_HEAD)
        },
        "served_fp8_weights_per_rank": sum(
            layer.calls * layer.n * layer.k for layer in (*TRUNK, *MTP_BLOCK, LM_HEAD)
        ),
        "served_crossover_m": {f"{n}x{k}": crossover(gpu, eff, n, k) for n, k in SERVED_SHAPES},
        "served_crossover_band": band(gpu, eff, SERVED_SHAPES),
        "per_layer_us": per_layer_us(gpu, eff, shapes),
        "served_per_layer_us": per_layer_us(gpu, eff, SERVED_SHAPES),
        "h100_us": {
            f"{n}x{k}": {
                str(m): {p: round(t * 1e6, 1) for p, t in path_times(H100, eff, m, n, k).items()}
                for m in (256, 512, 1024)
            }
            for n, k in ((12288, 5120),)  # the model gives 5120x12288 the same times
        },
    }


def layer_table(per_layer: dict[str, Any]) -> list[str]:
    lines = [
        "| N x K | M | BF16 us | Marlin us | unpack + cuBLAS us | dual path us |",
        "|---|---|---|---|---|---|",
    ]
    for shape, by_m in per_layer.items():
        lines += [
            f"| {shape} | {m} | " + " | ".join(f"{t[p]:,.1f}" for p in PATHS) + " |"
            for m, t in by_m.items()
        ]
    return lines


def report(result: dict[str, Any]) -> str:
    """The forecast as Markdown tables and a few lines."""
    lines = [
        *layer_table(result["per_layer_us"]),
        "",
        "served model's FP8 layers (one TP2 rank; attention is BF16):",
        "",
        *layer_table(result["served_per_layer_us"]),
    ]
    errors = result["error_vs_reference_pct"]
    lines += [
        "",
        "| dense layers | prefill 12k tok/s | reference | error | decode tok/s | reference "
        "| error |",
    ]
    lines.append("|---|---|---|---|---|---|---|")
    for c, rates in result["configurations"].items():
        ref = result["reference"]["configurations"][c]
        err = errors["configurations"].get(c)
        e_prefill, e_decode = (
            (f"{err['prefill_12k']}%", f"{err['decode']}%") if err else ("fitted",) * 2
        )
        lines.append(
            f"| {c} | {rates['prefill_12k_tok_s']:,.0f} | {ref['prefill_12k_tok_s']:,.0f} "
            f"| {e_prefill} | {rates['decode_tok_s']:.1f} | {ref['decode_tok_s']:.1f} "
            f"| {e_decode} |"
        )
    lines += ["", "| case | predicted tok/s | reference | error |", "|---|---|---|---|"]
    for name, case in result["cases"].items():
        low, high = result["reference"]["cases"][name]
        ref = f"{low:,.1f}" if low == high else f"{low:.1f}-{high:.1f}"
        lines.append(f"| {name} | {case['tok_s']:,.1f} | {ref} | {errors['cases'][name]}% |")
    band, served = result["crossover_band"], result["served_crossover_band"]
    lines += [
        "",
        "crossover M: " + ", ".join(f"{s} {m}" for s, m in result["crossover_m"].items()),
        f"crossover band: {band[0]}-{band[1]}" if band else "crossover band: none",
        "served model's FP8 layers per pass: "
        + ", ".join(
            f"{name} {layer['shape']} x{layer['calls_per_pass']}"
            for name, layer in result["served_layers"].items()
        )
        + f" ({result['served_fp8_weights_per_rank'] / 1e9:.3f} billion weights)",
        "served model's crossover M: "
        + ", ".join(f"{s} {m}" for s, m in result["served_crossover_m"].items()),
        f"served model's crossover band: {served[0]}-{served[1]}"
        if served
        else "served model's crossover band: none",
        "efficiencies from the H200 (of bandwidth, of BF16 peak, fixed us): "
        + "; ".join(
            f"{p} {e['of_bandwidth']}, {e['of_bf16_peak']}, {e['fixed_us']}"
            for p, e in result["inputs"]["efficiencies_from_h200"].items()
        ),
        "model against the H200 rows: median |error| {median}%, 90th percentile {p90}%".format(
            **result["inputs"]["h200_abs_error_pct"]
        ),
        "non-dense time fitted to BF16: prefill 12k {prefill_12k} s, decode step "
        "{decode_step} s".format(**result["non_dense_s"]),
        "the FP8-only row asks for: Marlin at {marlin_of_bf16_peak} of the BF16 peak (prefill; "
        "band {crossover_band_at_that_marlin}) or {bandwidth_gb_s} GB/s (decode; band "
        "{crossover_band_at_that_bandwidth})".format(**result["implied_by_fp8_reference"])
        if result["implied_by_fp8_reference"]
        else "the FP8-only row is out of this model's reach",
        "the same model's crossovers on the H200: "
        + ", ".join(f"{s} {m}" for s, m in result["h200_crossover_m"].items()),
        "",
        "| H100 N x K | M | BF16 us | Marlin us | unpack + cuBLAS us |",
        "|---|---|---|---|---|",
    ]
    for shape, by_m in result["h100_us"].items():
        lines += [
            f"| {shape} | {m} | {t['bf16']:.0f} | {t['marlin']:.0f} | {t['unpack_cublas']:.0f} |"
            for m, t in by_m.items()
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gb10_forecast.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", help="NxK per layer, comma-separated (default: calibrate's)")
    parser.add_argument("--tokens-per-step", type=float, help=f"default {TOKENS_PER_STEP}")
    parser.add_argument("--json", type=Path, help="forecast to write as JSON")
    args = parser.parse_args(argv)
    shapes = list(SHAPES)
    if args.shapes:
        shapes = [
            (int(n), int(k))
            for n, _, k in (s.strip().lower().partition("x") for s in args.shapes.split(","))
        ]
    command = [COMMAND]
    for flag, value in (
        ("--shapes", args.shapes),
        ("--tokens-per-step", args.tokens_per_step),
        ("--json", args.json),
    ):
        if value:
            command.append(f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}")
    h200 = json.loads(H200_RESULT.read_text(encoding="utf-8"))
    tokens_per_step = args.tokens_per_step or TOKENS_PER_STEP
    result = forecast(shapes, h200, tokens_per_step, " ".join(command))
    print(report(result), end="")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
