"""Plain-torch inverse of Marlin's 8-bit layout: an independent statement of the index math.

`packed[kt, nt*256 + th*8 + w*2 + r]`, byte b (little-endian) holds W[k, n] with
k = 16*kt + 2*(th%4) + (0, 8, 1, 9)[b] and n = 64*nt + 16*w + 8*r + th//4.
Written with reshapes only, so it shares nothing with the overlay's kernel or layout module.
"""

from __future__ import annotations

import torch

from vllm_dualpath.layout import CHANNEL_PERM, GROUP_PERM
from vllm_dualpath.marlin_reference import BF16_EXPONENT_BIAS


def marlin_bytes_to_weight(packed: torch.Tensor) -> torch.Tensor:
    """int32 [K_pad/16, 4*N_pad] -> float8_e4m3fn [N_pad, K_pad]."""
    k_tiles, columns = packed.shape
    n_tiles = columns // 256
    # byte index b = 2*b_hi + b_lo; thread th = 4*a + c
    raw = packed.contiguous().view(torch.uint8)
    raw = raw.reshape(k_tiles, n_tiles, 8, 4, 4, 2, 2, 2)  # kt nt a c w r b_hi b_lo
    # n = 64*nt + 16*w + 8*r + a ; k = 16*kt + 8*b_lo + 2*c + b_hi
    weight = raw.permute(1, 4, 5, 2, 0, 7, 3, 6).reshape(n_tiles * 64, k_tiles * 16)
    return weight.contiguous().view(torch.float8_e4m3fn)


def marlin_scales_to_true(scales: torch.Tensor, size_k: int, group_size: int) -> torch.Tensor:
    """Permuted Marlin scales (x 2^120) -> true BF16 scales in [rows, N_pad] order."""
    group_perm, channel_perm = list(GROUP_PERM), list(CHANNEL_PERM)
    perm = group_perm if group_size != -1 and group_size < size_k else channel_perm
    inverse = torch.argsort(torch.tensor(perm))
    rows, size_n = scales.shape
    unpermuted = scales.reshape(-1, len(perm))[:, inverse].reshape(rows, size_n)
    return unpermuted / BF16_EXPONENT_BIAS
