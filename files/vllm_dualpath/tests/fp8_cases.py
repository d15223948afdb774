"""Test data: FP8 weights with every byte code, scales of every kind, and awkward shapes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from vllm_dualpath import layout


@dataclass(frozen=True)
class Case:
    size_n: int
    size_k: int
    scales: str  # "tensor", "shard", "channel" or "block"
    seed: int = 0

    @property
    def block(self) -> tuple[int, int] | None:
        return (128, 128) if self.scales == "block" else None

    def __str__(self) -> str:
        return f"{self.scales}-n{self.size_n}-k{self.size_k}"


def all_codes_weight(size_n: int, size_k: int, generator: torch.Generator) -> torch.Tensor:
    """uint8 [n, k]: random bytes, with all 256 codes present when the weight has room."""
    codes = torch.randint(0, 256, (size_n * size_k,), dtype=torch.uint8, generator=generator)
    count = min(256, codes.numel())
    positions = torch.randperm(codes.numel(), generator=generator)[:count]
    codes[positions] = torch.arange(count, dtype=torch.uint8)
    return codes.view(size_n, size_k)


def random_scales(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """Positive float32 scales spread over 2**-24 .. 2**2 with random mantissas."""
    exponent = torch.randint(-24, 3, shape, generator=generator).float()
    mantissa = 1 + torch.rand(shape, generator=generator)
    return mantissa * torch.exp2(exponent)


def checkpoint_scales(case: Case, generator: torch.Generator) -> torch.Tensor:
    if case.scales == "tensor":
        return random_scales((1,), generator)
    if case.scales == "shard":
        shards = next(s for s in (3, 2, 1) if case.size_n % s == 0)
        return random_scales((shards,), generator)
    if case.scales == "channel":
        return random_scales((case.size_n,), generator)
    blocks_n = -(-case.size_n // 128)
    blocks_k = -(-case.size_k // 128)
    return random_scales((blocks_n, blocks_k), generator)


def build(case: Case) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(weight uint8 [n, k], packed, stored scales, stored bias) for a case."""
    generator = torch.Generator().manual_seed(case.seed * 7919 + case.size_n * 31 + case.size_k)
    weight = all_codes_weight(case.size_n, case.size_k, generator)
    scales = checkpoint_scales(case, generator)
    bias = torch.randn(case.size_n, generator=generator).to(torch.bfloat16)
    packed, stored, stored_bias = layout.prepare_reference(
        weight.view(torch.float8_e4m3fn), scales, bias, case.block
    )
    assert stored_bias is not None
    return weight, packed, stored, stored_bias


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """Raw 16-bit patterns of a BF16 tensor, for exact comparison (NaN included)."""
    return tensor.contiguous().view(torch.int16)
