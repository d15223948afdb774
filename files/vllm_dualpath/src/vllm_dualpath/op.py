"""The dual-path custom op: one FP8 weight-only linear that picks Marlin or unpack + cuBLAS by M.

The branch lives inside an opaque op because vLLM compiles the model without shape guards: a
Python ``if`` on M in traced code would be frozen at trace time. The paths per M are in the
package README.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional name

from vllm_dualpath import ahead, calls, layout, scratch, settings, unpack
from vllm_dualpath.calibration import MARLIN, UNPACK, CalibrationTable, foreign_gpu
from vllm_dualpath.calibration import load_for_service as load_table

logger = logging.getLogger("vllm.dualpath")

MarlinApply = Callable[..., torch.Tensor]

_state_lock = threading.Lock()
_marlin_apply: MarlinApply | None = None
_settings: settings.Settings | None = None
_table: CalibrationTable | None = None
_capture_fallback_logged = False
_gpu_checked = False
_unmeasured_logged: set[tuple[int, int]] = set()


def install_marlin_apply(marlin_apply: MarlinApply | None) -> None:
    """Set the Marlin apply the small-M path calls, with apply_fp8_marlin_linear's keywords."""
    global _marlin_apply
    _marlin_apply = marlin_apply


def configure(current: settings.Settings, table: CalibrationTable | None) -> None:
    """Fix the thresholds, channel-scale mode and calibration table for this process."""
    global _settings, _table, _gpu_checked
    with _state_lock:
        _settings, _table, _gpu_checked = current, table, False
        _unmeasured_logged.clear()
    calls.configure(current.stats_dir, current.report_interval_s)


def _current() -> tuple[settings.Settings, CalibrationTable | None]:
    global _settings, _table
    with _state_lock:
        if _settings is None:
            _settings = settings.load()
            if _settings.calibration_table is not None:
                _table = load_table(_settings.calibration_table, _settings.strict)
            calls.configure(_settings.stats_dir, _settings.report_interval_s)
        return _settings, _table


def check_table_gpu(gpu: str) -> None:
    """Drop a table measured on another GPU model; once per process, at the first GPU call."""
    global _table, _gpu_checked
    with _state_lock:
        if _gpu_checked:
            return
        _gpu_checked = True
        if _table is not None and foreign_gpu(_table, gpu):
            logger.warning(
                "vllm-dualpath: calibration table measured on %s, not on this %s; thresholds apply",
                _table.gpu,
                gpu,
            )
            _table = None


def _note_unmeasured(table: CalibrationTable, size_n: int, size_k: int) -> None:
    if (size_n, size_k) in _unmeasured_logged:
        return
    _unmeasured_logged.add((size_n, size_k))
    key = table.key
    logger.info(
        "vllm-dualpath: the calibration table has no %dx%d layer (measured for %s); "
        "thresholds apply to it",
        size_n,
        size_k,
        ", ".join(f"{n}x{k}" for n, k in key.shapes) if key else "other shapes",
    )


def choose_path(m: int, size_n: int, size_k: int) -> str:
    """'marlin' or 'unpack' for a call with M tokens on an (n, k) layer."""
    current, table = _current()
    if m <= current.small_m_max:
        return MARLIN
    # A measured shape knows its own crossovers, which may lie above the large-M threshold
    # (measured crossovers: docs/perf/dualpath-h200.md).
    if table is not None and table.measured(size_n, size_k):
        return table.lookup(size_n, size_k, m)
    if table is not None:
        _note_unmeasured(table, size_n, size_k)
    if m >= current.large_m_min:
        return UNPACK
    return MARLIN if table is None else table.lookup(size_n, size_k, m)


def _call_marlin(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    workspace: torch.Tensor | None,
    size_n: int,
    size_k: int,
    bias: torch.Tensor | None,
    use_fp32_reduce: bool,
) -> torch.Tensor:
    if _marlin_apply is None:
        raise RuntimeError(
            "vllm-dualpath: no Marlin apply installed; vllm_dualpath.plugin.register() installs "
            "vLLM's, tests and benchmarks install theirs with op.install_marlin_apply()"
        )
    output = _marlin_apply(
        input=input,
        weight=weight,
        weight_scale=weight_scale,
        workspace=workspace,
        size_n=size_n,
        size_k=size_k,
        bias=bias,
        use_fp32_reduce=use_fp32_reduce,
    )
    # The fake implementation promises a fresh contiguous tensor.
    return output.contiguous()


def _marlin_counted(m: int, arguments: dict[str, Any]) -> torch.Tensor:
    output = _call_marlin(**arguments)
    calls.record(MARLIN, m, arguments["size_n"], arguments["size_k"])
    return output


def _matmul_fp32(x: torch.Tensor, weight_nk: torch.Tensor) -> torch.Tensor:
    """x @ weight.T accumulated and returned in fp32 (BF16 inputs are exact in fp32)."""
    if x.is_cuda:
        return torch.mm(x, weight_nk.t(), out_dtype=torch.float32)
    return torch.mm(x.float(), weight_nk.t().float())


def scales_for_unpack(weight_scale: torch.Tensor, channel_scale: str) -> torch.Tensor | None:
    """The scales the unpack folds into the weight: None when channel-wise scales go to the
    GEMM epilogue instead."""
    if weight_scale.shape[0] == 1 and channel_scale == settings.CHANNEL_SCALE_EPILOGUE:
        return None
    return weight_scale


def linear_on_unpacked(
    x: torch.Tensor,
    unpacked: torch.Tensor,
    weight_scale: torch.Tensor,
    size_n: int,
    bias: torch.Tensor | None,
    channel_scale: str,
) -> torch.Tensor:
    """x[M, size_k] @ W.T (+ bias) with W unpacked with the scales ``scales_for_unpack`` names,
    rounded as Marlin's kernel rounds (package README, "Where the scale goes")."""
    if scales_for_unpack(weight_scale, channel_scale) is None:
        padded_n = weight_scale.shape[-1]
        accumulator = _matmul_fp32(x, unpacked)
        channel_scales = layout.unpermute_channels(weight_scale.reshape(padded_n))[:size_n]
        accumulator.mul_(channel_scales.float() * 2.0**-layout.BF16_EXPONENT_BIAS_LOG2)
        output = accumulator.to(x.dtype)
    else:
        output = F.linear(x, unpacked)
    if bias is not None:
        output.add_(layout.unpermute_channels(bias)[:size_n])
    return output


def unpack_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    size_n: int,
    size_k: int,
    bias: torch.Tensor | None,
    weight_buffer: torch.Tensor | None,
    channel_scale: str,
) -> torch.Tensor:
    """x[M, size_k] @ W.T (+ bias) with W unpacked from the Marlin layout into weight_buffer."""
    scales = scales_for_unpack(weight_scale, channel_scale)
    unpacked = unpack.unpack_weight(weight, scales, size_n, size_k, out=weight_buffer)
    return linear_on_unpacked(x, unpacked, weight_scale, size_n, bias, channel_scale)


def _unpack_supported(input: torch.Tensor, weight_scale: torch.Tensor) -> bool:
    # Scales carry the BF16 exponent bias only for BF16 activations; FP16 ones stay on Marlin.
    return input.dtype == torch.bfloat16 and weight_scale.dtype == torch.bfloat16


def fp8_marlin_linear(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    workspace: torch.Tensor | None,
    size_n: int,
    size_k: int,
    bias: torch.Tensor | None,
    use_fp32_reduce: bool,
) -> torch.Tensor:
    """apply_fp8_marlin_linear's contract, dispatched on M = tokens in this call."""
    global _capture_fallback_logged
    m = input.numel() // input.shape[-1]
    if not _gpu_checked and input.is_cuda:
        check_table_gpu(torch.cuda.get_device_name(input.device))
    arguments: dict[str, Any] = {
        "input": input,
        "weight": weight,
        "weight_scale": weight_scale,
        "workspace": workspace,
        "size_n": size_n,
        "size_k": size_k,
        "bias": bias,
        "use_fp32_reduce": use_fp32_reduce,
    }
    if choose_path(m, size_n, size_k) == MARLIN or not _unpack_supported(input, weight_scale):
        ahead.served_elsewhere(weight)
        return _marlin_counted(m, arguments)
    current, _ = _current()
    x = input.reshape(m, size_k)
    ahead_from = max(current.large_m_min, current.unpack_ahead_min_m)
    if current.unpack_ahead and m >= ahead_from and not scratch.capturing(input.device):
        # Graphs captured later (mid-range M) unpack into the plain slot: keep it grown.
        scratch.acquire(input.device, size_n * size_k)
        scales = scales_for_unpack(weight_scale, current.channel_scale)
        job = ahead.Job(weight, scales, size_n, size_k)
        state = ahead.for_device(input.device)
        state.depth = current.unpack_ahead_depth
        with state.unpacked(job) as unpacked:
            output = linear_on_unpacked(
                x, unpacked, weight_scale, size_n, bias, current.channel_scale
            )
        calls.record(UNPACK, m, size_n, size_k)
        return output.reshape(*input.shape[:-1], size_n)
    ahead.served_elsewhere(weight)
    buffer = scratch.acquire(input.device, size_n * size_k)
    if buffer is None:
        if not _capture_fallback_logged:
            _capture_fallback_logged = True
            logger.info(
                "vllm-dualpath: scratch too small during CUDA-graph capture (M=%d, %dx%d); "
                "Marlin serves that graph",
                m,
                size_n,
                size_k,
            )
        return _marlin_counted(m, arguments)
    output = unpack_linear(
        x,
        weight,
        weight_scale,
        size_n,
        size_k,
        bias,
        buffer,
        current.channel_scale,
    )
    calls.record(UNPACK, m, size_n, size_k)
    return output.reshape(*input.shape[:-1], size_n)


def _fp8_marlin_linear_fake(
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    workspace: torch.Tensor | None,
    size_n: int,
    size_k: int,
    bias: torch.Tensor | None,
    use_fp32_reduce: bool,
) -> torch.Tensor:
    return input.new_empty((*input.shape[:-1], size_n))


# Registered as vLLM registers its own ops (Library.define + impl), not with the custom_op
# decorator, whose autograd and dynamo wrappers cost host time on every call.
_library = torch.library.Library("dualpath", "FRAGMENT")
_library.define(
    "fp8_marlin_linear(Tensor input, Tensor weight, Tensor weight_scale, Tensor? workspace, "
    "SymInt size_n, SymInt size_k, Tensor? bias, bool use_fp32_reduce) -> Tensor"
)
_library.impl("fp8_marlin_linear", fp8_marlin_linear, "CUDA")
_library.impl("fp8_marlin_linear", fp8_marlin_linear, "CPU")  # tests, with a Marlin stand-in
torch.library.register_fake("dualpath::fp8_marlin_linear", _fp8_marlin_linear_fake, lib=_library)
