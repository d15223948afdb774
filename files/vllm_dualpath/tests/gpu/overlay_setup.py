"""Helpers for the GPU tests of the custom op: forcing a path, poisoning fresh allocations."""

from __future__ import annotations

import torch

from vllm_dualpath import op, settings
from vllm_dualpath.marlin_reference import apply_fp8_marlin_linear


def force(path: str, channel_scale: str = settings.CHANNEL_SCALE_EPILOGUE) -> None:
    """Route every call of the op to one path ('marlin' or 'unpack')."""
    if path == "marlin":
        current = settings.Settings(
            small_m_max=1 << 30, large_m_min=(1 << 30) + 1, channel_scale=channel_scale
        )
    else:
        current = settings.Settings(small_m_max=0, large_m_min=1, channel_scale=channel_scale)
    op.configure(current, None)
    op.install_marlin_apply(apply_fp8_marlin_linear)


def default_thresholds() -> None:
    """Marlin up to M = 20, unpack from M = 1024, Marlin in between (no table)."""
    op.configure(settings.Settings(), None)
    op.install_marlin_apply(apply_fp8_marlin_linear)


def poison_allocator() -> None:
    """Fill the caching allocator's free memory with NaN, so that output elements an op
    forgets to write read as NaN instead of stale numbers."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    nan = float("nan")
    large = torch.full((512 << 20,), nan, dtype=torch.bfloat16, device="cuda")  # 1 GiB
    small = [torch.full((1 << 19,), nan, dtype=torch.bfloat16, device="cuda") for _ in range(64)]
    torch.cuda.synchronize()
    del large, small
