"""FP8 layers in vLLM's Marlin format, built the way vLLM builds them, for the calibration command,
the benchmarks beside the package and the GPU tests.

``prepare_fp8_for_marlin`` restates vLLM 0.33.0's ``prepare_fp8_layer_for_marlin`` for a dense
layer, with the real ``gptq_marlin_repack``; the ops come from vLLM where it is loaded, else from
the library tools/marlin/build.py builds (``load_marlin_library``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from vllm_dualpath.layout import CHANNEL_PERM, GROUP_PERM, marlin_padded_nk

MARLIN_LIBRARY_ENV = "VLLM_DUALPATH_MARLIN_LIB"

# vllm.scalar_type.scalar_types.float8_e4m3fn.id: exponent 4, mantissa 3, signed, bias 0,
# finite values only, NaN as extended-range max/min.
FP8_E4M3FN_TYPE_ID = 4 | (3 << 8) | (1 << 16) | (1 << 49) | (2 << 50)

# Marlin converts FP8 to BF16 by shifting bits without re-biasing the exponent; vLLM folds the
# missing 2^(127 - 7) into the scales.
BF16_EXPONENT_BIAS = 2.0**120

MARLIN_TILE = 16
MARLIN_MAX_BLOCKS_PER_SM = 4


def marlin_ops_available() -> bool:
    return hasattr(torch.ops, "_C") and hasattr(torch.ops._C, "gptq_marlin_repack")


def load_marlin_library(path: str | os.PathLike[str] | None = None) -> bool:
    """Make torch.ops._C.marlin_gemm available; True when it is. No error when absent."""
    if marlin_ops_available():
        return True
    candidate = path or os.environ.get(MARLIN_LIBRARY_ENV)
    if not candidate or not Path(candidate).is_file():
        return False
    torch.ops.load_library(str(candidate))
    return marlin_ops_available()


def marlin_permute_scales(
    scales: torch.Tensor, size_k: int, size_n: int, group_size: int
) -> torch.Tensor:
    group_perm, channel_perm = GROUP_PERM, CHANNEL_PERM
    if group_size != -1 and group_size < size_k:
        scales = scales.reshape(-1, len(group_perm))[:, group_perm]
    else:
        scales = scales.reshape(-1, len(channel_perm))[:, channel_perm]
    return scales.reshape(-1, size_n).contiguous()


def marlin_permute_bias(bias: torch.Tensor) -> torch.Tensor:
    channel_perm = CHANNEL_PERM
    return bias.reshape(-1, len(channel_perm))[:, channel_perm].reshape(bias.shape).contiguous()


@dataclass(frozen=True)
class MarlinFp8Layer:
    """A dense FP8 layer as vLLM holds it after `prepare_fp8_layer_for_marlin`."""

    qweight: torch.Tensor  # int32 [K_pad / 16, 4 * N_pad]
    scales: torch.Tensor  # BF16, permuted, times 2^120: [1 or K_pad / group, N_pad]
    bias: torch.Tensor | None  # BF16 [N_pad], permuted like channel-wise scales
    size_n: int
    size_k: int
    group_size: int  # -1: channel-wise

    @property
    def padded_nk(self) -> tuple[int, int]:
        return self.qweight.shape[1] * 4 // MARLIN_TILE, self.qweight.shape[0] * MARLIN_TILE


def expand_scales(
    scale: torch.Tensor, size_n: int, size_k: int, block_size: tuple[int, int] | None
) -> torch.Tensor:
    """Scales as vLLM expands them before padding: [1, N] or [K / block_k, N], float32."""
    scale = scale.float()
    if block_size is None:
        if scale.numel() == 1:
            return scale.reshape(1, 1).expand(1, size_n).contiguous()
        return scale.reshape(1, size_n)
    block_n, _ = block_size
    # weight_scale_inv is [ceil(N / block_n), K / block_k]; vLLM transposes it to K-major.
    return scale.t().repeat_interleave(block_n, dim=1)[:, :size_n].contiguous()


def dequantize_fp8(
    weight: torch.Tensor, scale: torch.Tensor, block_size: tuple[int, int] | None
) -> torch.Tensor:
    """The dequantized BF16 weight [N, K]: fp8 x BF16 scale, exact in fp32, rounded once."""
    size_n, size_k = weight.shape
    per_k_n = expand_scales(scale.to(torch.bfloat16), size_n, size_k, block_size)
    if block_size is not None:
        per_k_n = per_k_n.repeat_interleave(block_size[1], dim=0)[:size_k]
    return (weight.float() * per_k_n.t().float()).to(torch.bfloat16)


def prepare_fp8_for_marlin(
    weight: torch.Tensor,
    scale: torch.Tensor,
    block_size: tuple[int, int] | None = None,
    bias: torch.Tensor | None = None,
) -> MarlinFp8Layer:
    """Repack an FP8 [N, K] weight and its scales exactly as vLLM does for Marlin."""
    if weight.dtype != torch.float8_e4m3fn or weight.dim() != 2:
        raise ValueError("expected a 2-D float8_e4m3fn weight [N, K]")
    size_n, size_k = weight.shape
    group_size = -1 if block_size is None else block_size[1]
    padded_n, padded_k = marlin_padded_nk(size_n, size_k, group_size)

    # pack_fp8_to_int32: 4 consecutive K bytes per int32, then K-major.
    qweight = weight.contiguous().view(torch.int32).t().contiguous()
    qweight = torch.nn.functional.pad(qweight, (0, padded_n - size_n, 0, (padded_k - size_k) // 4))
    marlin_qweight = torch.ops._C.gptq_marlin_repack(qweight, padded_k, padded_n, 8, False)

    scales = expand_scales(scale.to(torch.bfloat16), size_n, size_k, block_size)
    scales = scales.to(torch.bfloat16)
    pad_rows = padded_k // group_size - scales.shape[0] if group_size > 0 else 0
    scales = torch.nn.functional.pad(scales, (0, padded_n - size_n, 0, pad_rows))
    scales = marlin_permute_scales(scales, padded_k, padded_n, group_size)
    scales = scales * BF16_EXPONENT_BIAS  # exact: a power of two on BF16

    marlin_bias = None
    if bias is not None:
        marlin_bias = marlin_permute_bias(
            torch.nn.functional.pad(bias.to(torch.bfloat16), (0, padded_n - size_n))
        )
    return MarlinFp8Layer(marlin_qweight, scales, marlin_bias, size_n, size_k, group_size)


_workspaces: dict[torch.device, torch.Tensor] = {}


def marlin_workspace(device: torch.device) -> torch.Tensor:
    """Zeroed locks; Marlin resets them after each call, so one per device serves all calls."""
    if device not in _workspaces:
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        _workspaces[device] = torch.zeros(
            sms * MARLIN_MAX_BLOCKS_PER_SM, dtype=torch.int32, device=device
        )
    return _workspaces[device]


def apply_fp8_marlin_linear(
    *,
    input: torch.Tensor,
    weight: torch.Tensor,
    weight_scale: torch.Tensor,
    workspace: torch.Tensor | None,
    size_n: int,
    size_k: int,
    bias: torch.Tensor | None,
    use_fp32_reduce: bool = True,
) -> torch.Tensor:
    """vLLM's `apply_fp8_marlin_linear` for BF16 activations (no atomic add), same keywords."""
    padded_n, padded_k = weight.shape[1] * 4 // MARLIN_TILE, weight.shape[0] * MARLIN_TILE
    x2 = input.reshape(-1, input.shape[-1])
    if padded_k != size_k:
        x2 = torch.nn.functional.pad(x2, (0, padded_k - size_k))
    out = torch.ops._C.marlin_gemm(
        x2,
        None,
        weight,
        bias,
        weight_scale,
        None,
        None,
        None,
        marlin_workspace(input.device) if workspace is None else workspace,
        FP8_E4M3FN_TYPE_ID,
        x2.shape[0],
        padded_n,
        padded_k,
        False,
        use_fp32_reduce,
        False,
    )
    if padded_n != size_n:
        out = out[:, :size_n].contiguous()
    return out.reshape(*input.shape[:-1], size_n)


def marlin_linear(x: torch.Tensor, layer: MarlinFp8Layer) -> torch.Tensor:
    return apply_fp8_marlin_linear(
        input=x,
        weight=layer.qweight,
        weight_scale=layer.scales,
        workspace=None,
        size_n=layer.size_n,
        size_k=layer.size_k,
        bias=layer.bias,
    )


def random_fp8_weight(
    size_n: int, size_k: int, device: torch.device | str, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Random finite FP8 values over the whole range, subnormals and signed zeros included."""
    raw = torch.randint(
        0, 256, (size_n, size_k), dtype=torch.uint8, device=device, generator=generator
    )
    # 0x7F and 0xFF are NaN in e4m3fn; map them to the largest finite magnitude.
    raw = torch.where((raw & 0x7F) == 0x7F, raw - 1, raw)
    return raw.view(torch.float8_e4m3fn)


def random_scales(
    size_n: int,
    size_k: int,
    block_size: tuple[int, int] | None,
    device: torch.device | str,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Positive float32 scales of realistic magnitude: [N] or [ceil(N/bn), ceil(K/bk)]."""
    if block_size is None:
        shape: tuple[int, ...] = (size_n,)
    else:
        shape = (math.ceil(size_n / block_size[0]), math.ceil(size_k / block_size[1]))
    return torch.rand(shape, device=device, generator=generator) * 2e-3 + 1e-4
