"""The stand-in's model: two small dense FP8 layers that every request runs on both ranks.

They are packed into vLLM's Marlin layout at start-up and called through the lab vllm's
``MarlinFP8ScaledMMLinearKernel.apply_weights``, so with the overlay's plugin registered every
call goes through ``torch.ops.dualpath.fp8_marlin_linear`` (its Triton kernel under
TRITON_INTERPRET=1). A request is one prefill over its prompt's words, then
``min(max_tokens - 1, MAX_DECODE_STEPS)`` one-token decode steps, each running every layer once.
Without torch, the lab vllm or the overlay, the stand-in still serves and logs, as an error,
that it runs no FP8 layer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("vllm.standin.model")

SOURCE_MODULE: Final = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp8"
KERNEL_MODULE: Final = "vllm.model_executor.kernels.linear.scaled_mm.marlin"
MARLIN_BACKEND: Final = "marlin"
# OpenAI's and vLLM's default for /v1/completions.
DEFAULT_MAX_TOKENS: Final = 16
# The CPU Marlin reference takes 3.5 ms a call (9 ms in the image on a busy lab): 64 steps keep
# a request near a second a rank, well inside the 10 s shard timeout, whatever max_tokens asks.
MAX_DECODE_STEPS: Final = 64
BLOCK: Final = (128, 128)


@dataclass(frozen=True)
class LayerSpec:
    size_n: int
    size_k: int
    block: tuple[int, int] | None  # None: channel-wise scales; else block scales (n, k)


# x[M, 512] -> [M, 256] (channel scales) -> [M, 512] (128x128 block scales): both scale kinds the
# overlay handles, and small enough that one interpreted unpack stays well under a second.
LAYERS: Final = (LayerSpec(256, 512, None), LayerSpec(512, 256, BLOCK))
SEED: Final = 20260


@dataclass(frozen=True)
class DenseFP8:
    """A dense FP8 layer as vLLM holds it after prepare_fp8_layer_for_marlin."""

    weight: torch.Tensor  # Marlin-packed int32 [K / 16, 4 * N]
    weight_scale: torch.Tensor | None  # channel-wise: BF16 [1, N], permuted, times 2**120
    weight_scale_inv: torch.Tensor | None  # block-wise: BF16 [K / 128, N], likewise
    bias: torch.Tensor  # BF16 [N], permuted
    output_size_per_partition: int
    input_size_per_partition: int


@dataclass(frozen=True)
class Work:
    """What one request asks of the model: its prompt's tokens and the tokens to generate."""

    tokens: int
    max_tokens: int

    @property
    def decode_steps(self) -> int:
        return min(self.max_tokens - 1, MAX_DECODE_STEPS)

    @classmethod
    def of_request(cls, prompt: str, request: Mapping[str, Any]) -> Work:
        """From a /v1/completions body; ValueError (a 400 answer) for a bad max_tokens."""
        raw = request.get("max_tokens", DEFAULT_MAX_TOKENS)
        if raw is None:
            raw = DEFAULT_MAX_TOKENS
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {raw!r}")
        return cls(tokens=len(prompt.split()), max_tokens=raw)

    @classmethod
    def of_message(cls, message: Mapping[str, Any]) -> Work:
        """From a shard message rank 0 sent (``to_message``)."""
        return cls(tokens=int(message["tokens"]), max_tokens=int(message["max_tokens"]))

    def to_message(self) -> dict[str, int]:
        return {"tokens": self.tokens, "max_tokens": self.max_tokens}


class Model:
    """The packed layers and the kernel that applies them; one forward at a time."""

    def __init__(self, linear_backend: str = MARLIN_BACKEND) -> None:
        import torch
        from vllm_dualpath import layout

        kernels = _import(KERNEL_MODULE)
        # Both ranks share the lab's two cores: with a thread pool each, OpenMP's spinning
        # made a decode call 20x slower there (9 ms at one thread, 170 ms at two).
        torch.set_num_threads(1)
        generator = torch.Generator().manual_seed(SEED)
        self.layers: list[DenseFP8] = []
        self.kernels: list[Any] = []
        for spec in LAYERS:
            self.layers.append(_pack(spec, generator, layout))
            self.kernels.append(kernels.MarlinFP8ScaledMMLinearKernel(spec.block is not None))
        self.size_k = LAYERS[0].size_k
        # On a GPU with native FP8, vLLM picks FlashInfer or CUTLASS for dense FP8 layers unless
        # told Marlin: then no call reaches Marlin's apply, nor the overlay that replaces it.
        self.on_marlin = linear_backend == MARLIN_BACKEND
        # vLLM's engine runs one step at a time; the op's scratch buffers rely on that.
        self.lock = threading.Lock()

    def layer(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """One layer on x[M, size_k] through vLLM's kernel class (and so the patched name)."""
        layer = self.layers[index]
        if not self.on_marlin:
            from marlin_standin import reference_linear

            scales = layer.weight_scale_inv if layer.weight_scale is None else layer.weight_scale
            n, k = layer.output_size_per_partition, layer.input_size_per_partition
            native: torch.Tensor = reference_linear(x, layer.weight, scales, n, k, layer.bias)
            return native
        output: torch.Tensor = self.kernels[index].apply_weights(layer, x, layer.bias)
        return output

    def step(self, m: int, generator: torch.Generator) -> torch.Tensor:
        import torch

        x = torch.randn(m, self.size_k, generator=generator).to(torch.bfloat16)
        for index in range(len(self.layers)):
            x = self.layer(index, x)
        return x

    def forward(self, tokens: int, decode_steps: int) -> None:
        """A prefill at M = tokens, then decode_steps steps at M = 1."""
        import torch

        generator = torch.Generator().manual_seed(tokens)
        with self.lock, torch.inference_mode():
            if tokens > 0:
                self.step(tokens, generator)
            for _ in range(decode_steps):
                self.step(1, generator)


def _import(name: str) -> Any:
    import importlib

    return importlib.import_module(name)


def _pack(spec: LayerSpec, generator: torch.Generator, layout: Any) -> DenseFP8:
    """A dense FP8 layer as vLLM holds it after prepare_fp8_layer_for_marlin (the overlay's
    layout.prepare_reference mirrors that): packed weight, Marlin scales, permuted bias."""
    import torch

    weight = torch.randn(spec.size_n, spec.size_k, generator=generator).to(torch.float8_e4m3fn)
    # Scales near 1/sqrt(K) keep activations near unit size through both layers.
    if spec.block is None:
        scales = torch.rand(spec.size_n, generator=generator) + 0.5
    else:
        rows, cols = -(-spec.size_n // spec.block[0]), -(-spec.size_k // spec.block[1])
        scales = torch.rand(rows, cols, generator=generator) + 0.5
    scales = scales / spec.size_k**0.5
    bias = torch.randn(spec.size_n, generator=generator).to(torch.bfloat16)
    packed, stored, stored_bias = layout.prepare_reference(weight, scales, bias, spec.block)
    return DenseFP8(
        weight=packed,
        weight_scale=None if spec.block else stored,
        weight_scale_inv=stored if spec.block else None,
        bias=stored_bias,
        output_size_per_partition=spec.size_n,
        input_size_per_partition=spec.size_k,
    )


_model: Model | None = None
_missing = ""


def load(linear_backend: str = MARLIN_BACKEND) -> Model | None:
    """Build the layers (after the plugins loaded, as vLLM loads its model); log loudly when
    the model cannot run, and say whether the overlay routes its apply."""
    global _model, _missing
    try:
        _model = Model(linear_backend)
    except ImportError as error:
        _missing = f"{error} ({type(error).__name__})"
        logger.error(
            "stand-in model NOT loaded: %s. Requests are answered without running any FP8 "
            "layer, so no dual-path call is made or counted (the image needs torch, triton, "
            "the lab vllm tree and the overlay on PYTHONPATH)",
            _missing,
        )
        return None
    source = _import(SOURCE_MODULE)
    routed = getattr(source.apply_fp8_marlin_linear, "__wrapped__", None) is not None
    shapes = ", ".join(
        f"{s.size_n}x{s.size_k} {'block' if s.block else 'channel'} scales" for s in LAYERS
    )
    logger.info("stand-in model: %d FP8 dense layers in Marlin layout (%s)", len(LAYERS), shapes)
    if not _model.on_marlin:
        logger.info(
            "stand-in model: --linear-backend %s: dense FP8 layers use the GPU's own FP8 kernel, "
            "not Marlin",
            linear_backend,
        )
    elif routed:
        logger.info("stand-in model: apply_fp8_marlin_linear is the dual-path overlay's wrapper")
    else:
        logger.warning(
            "stand-in model: apply_fp8_marlin_linear is NOT patched (the dualpath plugin did "
            "not register): every layer runs the lab vllm's Marlin and the overlay counts nothing"
        )
    return _model


def run(work: Work) -> None:
    """Run a request's (or a shard's) steps; says so when no model is loaded."""
    if _model is None:
        logger.warning("stand-in model not loaded (%s): request ran no FP8 layer", _missing)
        return
    _model.forward(work.tokens, work.decode_steps)
