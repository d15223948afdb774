"""The dense shapes a tensor-parallel rank runs, from a checkpoint's config.json."""

from __future__ import annotations

import json

import pytest

from model_configs import GLM45, GLM53_FLASH, MLA
from vllm_dualpath import model_shapes
from vllm_dualpath.calibrate import SHAPES


def pairs(shapes):
    return [(shape.name, shape.n, shape.k) for shape in shapes]


def test_a_glm45_rank_at_tp2_has_the_built_in_shapes():
    derived = pairs(model_shapes.rank_shapes(GLM45, 2))
    assert sorted((n, k) for _, n, k in derived) == sorted((s.n, s.k) for s in SHAPES[:6])


def test_mla_projections_are_replicated_or_split_as_vllm_does():
    derived = {name: (n, k) for name, n, k in pairs(model_shapes.rank_shapes(MLA, 2))}
    assert derived["fused_qkv_a_proj"] == (1536 + 512 + 64, 7168)  # replicated
    assert derived["q_b_proj"] == (64 * 192, 1536)
    assert derived["kv_b_proj"] == (64 * 256, 512)
    assert derived["o_proj"] == (7168, 64 * 128)
    assert derived["dense_gate_up"] == (18432, 7168)
    assert derived["shared_down"] == (7168, 1024)
    assert derived["lm_head"] == (64640, 7168)


def test_glm5_next_keeps_attention_in_bf16_so_only_mlps_and_lm_head_are_listed():
    derived = pairs(model_shapes.rank_shapes(GLM53_FLASH, 2))
    assert derived == [
        ("dense_gate_up", 12288, 4096),
        ("dense_down", 4096, 6144),
        ("shared_gate_up", 2048, 4096),
        ("shared_down", 4096, 1024),
        ("lm_head", 77440, 4096),
    ]
    no_dense = {**GLM53_FLASH, "mlp_layer_types": ["sparse"] * 45}
    assert [name for name, _, _ in pairs(model_shapes.rank_shapes(no_dense, 2))] == [
        "shared_gate_up",
        "shared_down",
        "lm_head",
    ]


def test_kv_heads_fewer_than_ranks_are_replicated():
    config = {**GLM45, "num_key_value_heads": 1}
    qkv = model_shapes.rank_shapes(config, 2)[0]
    assert (qkv.name, qkv.n) == ("qkv_proj", (48 + 2) * 128)


def test_the_vocabulary_is_padded_before_the_split():
    lm_head = model_shapes.rank_shapes({**GLM45, "vocab_size": 151553}, 2)[-1]
    assert lm_head.n == 151616 // 2


def test_a_dense_model_has_a_dense_mlp_and_no_shared_expert():
    config = {
        k: v for k, v in GLM45.items() if k not in ("n_routed_experts", "first_k_dense_replace")
    }
    names = [shape.name for shape in model_shapes.rank_shapes(config, 1)]
    assert "dense_gate_up" in names and not any(name.startswith("shared") for name in names)


def test_a_nested_text_config_is_read():
    shapes = model_shapes.rank_shapes({"text_config": GLM45}, 2)
    assert len(shapes) == 6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": None}, "hidden_size must be a positive integer"),
        ({"num_attention_heads": 95}, "num_attention_heads .95. does not divide across 2"),
        ({"vocab_size": "many"}, "vocab_size must be"),
    ],
)
def test_a_config_that_does_not_fit_is_refused_naming_the_field(change, message):
    with pytest.raises(model_shapes.ModelConfigError, match=message):
        model_shapes.rank_shapes({**GLM45, **change}, 2)


def test_checkpoint_errors_name_the_directory(tmp_path):
    with pytest.raises(model_shapes.ModelConfigError, match=str(tmp_path)):
        model_shapes.checkpoint_shapes(tmp_path, 2)
    (tmp_path / "config.json").write_text(json.dumps(GLM45))
    assert len(model_shapes.checkpoint_shapes(tmp_path, 2)) == 6
