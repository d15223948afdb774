"""The four ways the benchmark runs one dense layer, each as a closure ready for graph capture."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import triton

from vllm_dualpath import scratch, settings, timing, unpack
from vllm_dualpath.calibrate import marlin_call, unpack_call
from vllm_dualpath.marlin_reference import (
    MarlinFp8Layer,
    dequantize_fp8,
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)

PATHS = ("bf16", "marlin", "unpack_cublas", "dualpath")


@dataclass(frozen=True)
class WeightSet:
    """One layer's weight in both forms: Marlin FP8 (what serves) and dense BF16 (the baseline)."""

    marlin: MarlinFp8Layer
    dense: torch.Tensor  # BF16 [N, K], the exact dequantized weight


def make_weight_sets(
    n: int,
    k: int,
    count: int,
    block_size: tuple[int, int] | None,
    generator: torch.Generator,
) -> list[WeightSet]:
    sets = []
    for _ in range(count):
        weight = random_fp8_weight(n, k, "cuda", generator)
        scale = random_scales(n, k, block_size, "cuda", generator)
        layer = prepare_fp8_for_marlin(weight, scale, block_size)
        sets.append(WeightSet(layer, dequantize_fp8(weight, scale, block_size)))
        del weight
    return sets


PathFactory = Callable[[WeightSet, torch.Tensor], Callable[[], object]]


def _bf16(w: WeightSet, x: torch.Tensor) -> Callable[[], object]:
    return lambda: torch.nn.functional.linear(x, w.dense)


def _marlin(w: WeightSet, x: torch.Tensor) -> Callable[[], object]:
    return marlin_call(w.marlin, x)


def _unpack_cublas(channel_scale: str) -> PathFactory:
    def factory(w: WeightSet, x: torch.Tensor) -> Callable[[], object]:
        return unpack_call(w.marlin, x, channel_scale)

    return factory


def _dualpath(w: WeightSet, x: torch.Tensor) -> Callable[[], object]:
    layer = w.marlin
    dual = torch.ops.dualpath.fp8_marlin_linear

    def call() -> torch.Tensor:
        return dual(
            x, layer.qweight, layer.scales, None, layer.size_n, layer.size_k, layer.bias, True
        )

    return call


def path_factories(channel_scale: str) -> dict[str, PathFactory]:
    return {
        "bf16": _bf16,
        "marlin": _marlin,
        "unpack_cublas": _unpack_cublas(channel_scale),
        "dualpath": _dualpath,
    }


def median_call_us(calls: timing.Calls, budget_s: float = timing.DEFAULT_BUDGET_S) -> float:
    """Median microseconds per call of `calls` (one per weight set), timed as graph replays."""
    return timing.median_call_us_side_by_side({"only": calls}, budget_s)["only"]


def unpack_only_us(weights: Sequence[WeightSet], budget_s: float, channel_scale: str) -> float:
    """The unpack alone, as the large-M path runs it (scales folded in unless channel-wise
    scales go to the GEMM epilogue)."""
    layers = [w.marlin for w in weights]
    n, k = layers[0].size_n, layers[0].size_k
    buffer = scratch.acquire(torch.device("cuda", torch.cuda.current_device()), n * k)

    def one(layer: MarlinFp8Layer) -> Callable[[], object]:
        channel_epilogue = (
            layer.scales.shape[0] == 1 and channel_scale == settings.CHANNEL_SCALE_EPILOGUE
        )
        scales = None if channel_epilogue else layer.scales
        return lambda: unpack.unpack_weight(layer.qweight, scales, n, k, out=buffer)

    return median_call_us([one(layer) for layer in layers], budget_s)


def graph_kernel_names(call: Callable[[], object]) -> list[str]:
    """The GPU operations (kernels, copies) one CUDA-graph replay of ``call`` runs, in order,
    as the profiler sees them."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    graph.replay()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    cuda = torch.autograd.DeviceType.CUDA
    try:
        with torch.profiler.profile(activities=activities) as profile:
            graph.replay()
            torch.cuda.synchronize()
        device_events = [e for e in profile.events() if e.device_type == cuda]
    except Exception as error:  # the list is evidence, not a result: say why it is missing
        return [f"profiler failed: {error}"]
    finally:
        del graph
    device_events.sort(key=lambda e: e.time_range.start)
    return [e.name[:160] for e in device_events]


def machine() -> dict[str, object]:
    """The GPU as torch and nvidia-smi name it, its L2 and SMs, and the software."""
    properties = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,power.limit,clocks.max.sm,memory.total",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.strip()
    except OSError as error:
        smi = f"nvidia-smi failed: {error}"
    return {
        "gpu": properties.name,
        "nvidia_smi": smi,
        "sms": properties.multi_processor_count,
        "l2_bytes": getattr(properties, "L2_cache_size", None),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
    }
