"""The dense layers one tensor-parallel rank runs, worked out from a checkpoint's config.json.

Shapes are the (out features N, in features K) each rank's linear layers have once vLLM has merged
and split them: q/k/v into one column-parallel layer (KV heads replicated where there are fewer
than ranks), gate/up into one, o_proj and down_proj split along K, MLA's low-rank projections
replicated (``q_a``+``kv_a`` merged) and its up-projections split along N, and the LM head padded
to a multiple of 64 rows before the split, as vLLM's vocabulary-parallel head pads it. Routed
experts are not listed: they are not dense layers; nor are attention projections of architectures
vLLM keeps in BF16.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCAB_PADDING = 64
# Architectures whose attention projections vLLM builds without quantization (vLLM 0.34.0 builds
# GLM-5-Next's MLA and KDA projections in BF16): only their MLPs and LM head reach Marlin.
BF16_ATTENTION_ARCHITECTURES = frozenset(
    {"Glm5NextForCausalLM", "Glm5NextForConditionalGeneration"}
)


class ModelConfigError(ValueError):
    """The config names no shape this module knows how to derive, or a size does not divide."""


@dataclass(frozen=True)
class Shape:
    """One dense layer of a tensor-parallel rank: out features N, in features K."""

    name: str
    n: int
    k: int

    @property
    def key(self) -> str:
        return f"{self.n}x{self.k}"


def _size(config: dict[str, Any], name: str) -> int:
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ModelConfigError(f"config.json: {name} must be a positive integer, got {value!r}")
    return value


def _split(total: int, ranks: int, what: str) -> int:
    if total % ranks:
        raise ModelConfigError(f"{what} ({total}) does not divide across {ranks} ranks")
    return total // ranks


def _attention(config: dict[str, Any], hidden: int, tp: int) -> list[Shape]:
    heads = _size(config, "num_attention_heads")
    local_heads = _split(heads, tp, "num_attention_heads")
    if config.get("kv_lora_rank"):
        rope = _size(config, "qk_rope_head_dim")
        nope = _size(config, "qk_nope_head_dim")
        v_head = _size(config, "v_head_dim")
        kv_rank = _size(config, "kv_lora_rank")
        q_rank = config.get("q_lora_rank")
        shapes = [Shape("kv_b_proj", local_heads * (nope + v_head), kv_rank)]
        if q_rank:
            shapes.append(Shape("fused_qkv_a_proj", q_rank + kv_rank + rope, hidden))
            shapes.append(Shape("q_b_proj", local_heads * (nope + rope), q_rank))
        else:
            shapes.append(Shape("q_proj", local_heads * (nope + rope), hidden))
            shapes.append(Shape("kv_a_proj_with_mqa", kv_rank + rope, hidden))
        shapes.append(Shape("o_proj", hidden, local_heads * v_head))
        return shapes
    head_dim = config.get("head_dim") or _split(hidden, heads, "hidden_size over heads")
    kv_heads = config.get("num_key_value_heads") or heads
    local_kv = max(1, kv_heads // tp)
    return [
        Shape("qkv_proj", (local_heads + 2 * local_kv) * head_dim, hidden),
        Shape("o_proj", hidden, local_heads * head_dim),
    ]


def _mlp(name: str, intermediate: int, hidden: int, tp: int) -> list[Shape]:
    local = _split(intermediate, tp, f"{name} intermediate size")
    return [Shape(f"{name}_gate_up", 2 * local, hidden), Shape(f"{name}_down", hidden, local)]


def _is_moe(config: dict[str, Any]) -> bool:
    return any(config.get(key) for key in ("n_routed_experts", "num_experts", "num_local_experts"))


def rank_shapes(config: dict[str, Any], tensor_parallel_size: int) -> list[Shape]:
    """Every distinct dense layer shape of one rank, in the model's order."""
    if tensor_parallel_size <= 0:
        raise ModelConfigError("tensor_parallel_size must be positive")
    text_config = config.get("text_config")
    if isinstance(text_config, dict):
        config = {**config, **text_config}
    hidden = _size(config, "hidden_size")
    tp = tensor_parallel_size
    architectures = set(config.get("architectures") or ())
    shapes = [] if architectures & BF16_ATTENTION_ARCHITECTURES else _attention(config, hidden, tp)
    moe = _is_moe(config)
    if isinstance(config.get("mlp_layer_types"), list):
        dense_layers = "dense" in config["mlp_layer_types"]
    else:
        dense_layers = config.get("first_k_dense_replace", 0 if moe else 1)
    if dense_layers:
        shapes += _mlp("dense", _size(config, "intermediate_size"), hidden, tp)
    shared = config.get("n_shared_experts") or 0
    if moe and shared:
        shapes += _mlp("shared", shared * _size(config, "moe_intermediate_size"), hidden, tp)
    elif moe and config.get("shared_expert_intermediate_size"):
        shapes += _mlp("shared", _size(config, "shared_expert_intermediate_size"), hidden, tp)
    vocab = _size(config, "vocab_size")
    padded = -(-vocab // VOCAB_PADDING) * VOCAB_PADDING
    shapes.append(Shape("lm_head", _split(padded, tp, "padded vocabulary"), hidden))
    distinct: dict[tuple[int, int], Shape] = {}
    for shape in shapes:
        distinct.setdefault((shape.n, shape.k), shape)
    return list(distinct.values())


def load_config(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "config.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ModelConfigError(f"{path}: {error}") from error
    if not isinstance(document, dict):
        raise ModelConfigError(f"{path}: top level must be an object")
    return document


def checkpoint_shapes(model_dir: Path, tensor_parallel_size: int) -> list[Shape]:
    """The dense shapes of one rank serving the checkpoint in ``model_dir``."""
    try:
        return rank_shapes(load_config(model_dir), tensor_parallel_size)
    except ModelConfigError as error:
        raise ModelConfigError(f"{model_dir}: {error}") from None
