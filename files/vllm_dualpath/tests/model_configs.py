"""config.json contents of three model families, for the shape and calibration tests."""

import json
from pathlib import Path

# A GLM-4.5-class MoE model: the shapes the built-in list was written for by hand.
GLM45 = {
    "hidden_size": 5120,
    "num_attention_heads": 96,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 12288,
    "moe_intermediate_size": 1536,
    "n_routed_experts": 160,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "vocab_size": 151552,
}

# A DeepSeek-V3-style MLA model.
MLA = {
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "first_k_dense_replace": 3,
    "vocab_size": 129280,
}

# GLM-5.3-Flash (GLM-5-Next), the served model: hidden 4096, KDA and MLA attention (BF16 in vLLM),
# a dense MLP in the first 3 of 45 layers, one shared expert of 2048, vocabulary 154,880, one MTP
# layer. Kept in one place, the file the GB10 forecast reads its inventory from.
GLM53_FLASH = json.loads(
    (Path(__file__).resolve().parents[1] / "benchmarks" / "glm53_flash.json").read_text(
        encoding="utf-8"
    )
)
