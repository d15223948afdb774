"""Layer shapes for the GPU tests: tile-aligned ones and ones Marlin must zero-pad."""

from __future__ import annotations

# (N, K, block_size or None for channel-wise scales)
ALIGNED = [(4096, 4096, None), (1536, 5120, None), (3072, 2048, (128, 128))]
# 2880 x 2880 pads K to 2944; 1000 x 5120 and 1000 x 1920 (128-blocks) pad N to 1024.
PADDED = [(2880, 2880, None), (1000, 5120, None), (1000, 1920, (128, 128))]
ALL = ALIGNED + PADDED


def shape_id(shape: tuple[int, int, tuple[int, int] | None]) -> str:
    n, k, block = shape
    return f"{n}x{k}-{'block' if block else 'channel'}"
