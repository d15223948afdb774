"""The GB10 forecast (benchmarks/gb10_forecast.py): its arithmetic, its fit, and the committed
forecast the benchmark role reads, which must be what the script writes."""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import gb10_forecast as fc
from model_configs import GLM53_FLASH
from vllm_dualpath.model_shapes import rank_shapes

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "roles" / "pair_benchmark" / "files" / "gb10_forecast.json"
COMMITTED_COMMAND = f"{fc.COMMAND} --json roles/pair_benchmark/files/gb10_forecast.json"
TEST_GPU = fc.Gpu("test", 100e9, 100e12)
IDEAL = fc.Kernel(1.0, 1.0, 0.0)


@pytest.fixture(scope="module")
def h200() -> dict:
    return json.loads(fc.H200_RESULT.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def eff(h200) -> fc.Efficiencies:
    return fc.fit(h200)


def test_the_committed_forecast_is_what_the_script_writes(tmp_path, capsys) -> None:
    written = tmp_path / "forecast.json"
    assert fc.main(["--json", str(written)]) == 0
    assert "crossover band" in capsys.readouterr().out
    fresh = json.loads(written.read_text(encoding="utf-8"))
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert committed.pop("command") == COMMITTED_COMMAND
    assert fresh.pop("command") == f"{fc.COMMAND} --json {written}"
    assert fresh == committed


def test_the_committed_forecast_has_what_the_benchmark_role_reads() -> None:
    result = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert result["gpu"] == "GB10"
    assert set(result["cases"]) == {
        "prefill_12k_warm",
        "decode_korean_prose",
        "decode_english_prose",
        "decode_code",
    }
    assert all(isinstance(case["tok_s"], float) for case in result["cases"].values())
    assert result["cases"]["prefill_12k_warm"]["tok_s"] == pytest.approx(
        result["configurations"]["dualpath"]["prefill_12k_tok_s"]
    )
    for rates in result["configurations"].values():
        assert set(rates) == {"prefill_12k_tok_s", "decode_tok_s"}
    assert set(result["configurations"]) == {"bf16", "fp8_marlin", "dualpath"}
    assert set(result["crossover_m"]) == {f"{n}x{k}" for n, k in fc.SHAPES}
    crossovers = list(result["crossover_m"].values())
    assert result["crossover_band"] == [min(crossovers), max(crossovers)]
    served = result["served_crossover_m"]
    assert set(served) == {f"{n}x{k}" for n, k in fc.SERVED_SHAPES}
    assert result["served_crossover_band"] == [min(served.values()), max(served.values())]
    assert set(result["served_per_layer_us"]) == set(served)
    assert set(result["error_vs_reference_pct"]["cases"]) == set(result["cases"])


def test_a_memory_bound_call_takes_its_bytes_over_the_bandwidth() -> None:
    n, k = 4096, 2048
    bf16 = fc.gemm_s(TEST_GPU, IDEAL, 1, n, k, 2)
    assert bf16 == pytest.approx((2 * n * k + 2 * (n + k)) / TEST_GPU.bandwidth, rel=1e-12)
    half = replace(IDEAL, bandwidth=0.5, fixed_s=3e-6)
    assert fc.gemm_s(TEST_GPU, half, 1, n, k, 2) == pytest.approx(2 * bf16 + 3e-6, rel=1e-12)
    marlin = fc.gemm_s(TEST_GPU, IDEAL, 1, n, k, 1)
    assert marlin == pytest.approx((n * k + 2 * (n + k)) / TEST_GPU.bandwidth, rel=1e-12)


def test_a_compute_bound_call_takes_its_flops_over_the_peak() -> None:
    m, n, k = 8192, 4096, 4096
    kernel = fc.Kernel(1.0, 0.25, 5e-6)
    flops = 2 * m * n * k
    expected = flops / (0.25 * TEST_GPU.bf16_flops) + 5e-6
    assert fc.gemm_s(TEST_GPU, kernel, m, n, k, 1) == pytest.approx(expected, rel=1e-12)


def test_unpack_then_cublas_adds_three_bytes_per_weight_to_bf16() -> None:
    unpack = fc.Kernel(0.5, 0.0, 2e-6)
    eff = fc.Efficiencies(IDEAL, IDEAL, unpack)
    n, k = 4096, 1024
    for m in (1, 4096):
        times = fc.path_times(TEST_GPU, eff, m, n, k)
        extra = 3 * n * k / (0.5 * TEST_GPU.bandwidth) + 2e-6
        assert times["unpack_cublas"] - times["bf16"] == pytest.approx(extra, rel=1e-9)


def test_the_fit_recovers_the_efficiencies_that_made_its_input() -> None:
    made = fc.Efficiencies(
        fc.Kernel(0.9, 0.7, 6e-6), fc.Kernel(0.8, 0.25, 8e-6), fc.Kernel(0.6, 0.0, 1e-6)
    )
    rows = [
        {"n": n, "k": k, "m": m, "path": path, "median_us": t * 1e6}
        for n, k in fc.SHAPES
        for m in (1, *fc.FIT_LARGE_M)
        for path, t in fc.path_times(fc.H200, made, m, n, k).items()
    ]
    found = fc.fit({"rows": rows})
    for was, got in zip(
        (made.bf16, made.marlin, made.unpack), (found.bf16, found.marlin, found.unpack), strict=True
    ):
        assert got.bandwidth == pytest.approx(was.bandwidth, rel=1e-9)
        assert got.compute == pytest.approx(was.compute, rel=1e-9)
        assert got.fixed_s == pytest.approx(was.fixed_s, rel=1e-6)


def test_the_bf16_row_is_reproduced_and_the_fp8_rows_are_not_fitted(eff) -> None:
    whole = fc.whole_model(fc.GB10, eff)
    assert whole.prefill_tok_s["bf16"] == pytest.approx(fc.REFERENCE["bf16"][0])
    assert whole.decode_tok_s["bf16"] == pytest.approx(fc.REFERENCE["bf16"][1])
    assert whole.prefill_tok_s["fp8_marlin"] != pytest.approx(fc.REFERENCE["fp8_marlin"][0])
    assert whole.other_prefill_s > 0 and whole.other_step_s > 0


def test_a_slower_marlin_lowers_the_fp8_prefill_and_leaves_bf16(eff) -> None:
    slower = replace(eff, marlin=replace(eff.marlin, compute=0.8 * eff.marlin.compute))
    base, slow = fc.whole_model(fc.GB10, eff), fc.whole_model(fc.GB10, slower)
    assert slow.prefill_tok_s["fp8_marlin"] < base.prefill_tok_s["fp8_marlin"]
    assert slow.prefill_tok_s["bf16"] == pytest.approx(base.prefill_tok_s["bf16"])


def test_halving_the_weight_bytes_speeds_up_decode(eff) -> None:
    whole = fc.whole_model(fc.GB10, eff)
    assert whole.decode_tok_s["fp8_marlin"] > whole.decode_tok_s["bf16"]
    # decode verifies 1 + DRAFTS tokens: below the small threshold, the dual path is Marlin
    assert whole.decode_tok_s["dualpath"] == pytest.approx(whole.decode_tok_s["fp8_marlin"])


def test_fewer_tokens_per_step_make_the_fp8_decode_gain_larger(eff) -> None:
    gains = [
        fc.whole_model(fc.GB10, eff, tokens).decode_tok_s["fp8_marlin"] / fc.REFERENCE["bf16"][1]
        for tokens in (2.0, 3.0, 3.8)
    ]
    assert gains == sorted(gains, reverse=True)


def test_the_crossover_falls_as_bandwidth_rises(eff) -> None:
    for n, k in fc.SHAPES:
        found = [
            fc.crossover(replace(fc.GB10, bandwidth=gb_s * 1e9), eff, n, k)
            for gb_s in (150, 200, 273, 400, 800, 3000)
        ]
        assert found == sorted(found, reverse=True), (n, k, found)
        assert found[0] > found[-1]


def test_marlins_lead_only_shrinks_as_m_grows(eff) -> None:
    """What the crossover's bisection relies on, checked M by M against a plain scan."""
    layers = [(layer.n, layer.k) for layer in (*fc.TRUNK, fc.LM_HEAD)]
    for gpu in (fc.GB10, fc.H200):
        for n, k in {*fc.SHAPES, *layers}:
            wins = [
                t["unpack_cublas"] <= t["marlin"]
                for t in (fc.path_times(gpu, eff, m, n, k) for m in range(1, fc.LARGEST_M + 1))
            ]
            first = wins.index(True) + 1
            assert all(wins[first - 1 :]), (gpu.name, n, k)
            assert fc.crossover(gpu, eff, n, k) == first


def test_the_dual_path_is_marlin_to_the_threshold_then_the_faster_path(eff) -> None:
    for n, k in fc.SHAPES:
        for m in (1, fc.SMALL_M_MAX, fc.SMALL_M_MAX + 1, 256, 512, 1024, 8192):
            times = fc.path_s(fc.GB10, eff, m, n, k)
            if m <= fc.SMALL_M_MAX:
                assert times["dualpath"] == times["marlin"]
            else:
                assert times["dualpath"] == min(times["marlin"], times["unpack_cublas"])


def test_a_12k_prefill_runs_every_token_through_every_layer_once() -> None:
    calls = fc.prefill_calls()
    for layer in (*fc.TRUNK, *fc.MTP_BLOCK):
        assert sum(m for one, m in calls if one == layer) == fc.PREFILL_TOKENS
    decode = fc.decode_calls()
    assert [m for one, m in decode if one == fc.LM_HEAD] == [1 + fc.DRAFTS] + [1] * fc.DRAFTS


def test_the_implied_figures_reproduce_the_fp8_row(eff) -> None:
    implied = fc.implied(fc.GB10, eff, fc.TOKENS_PER_STEP)
    marlin = replace(eff.marlin, compute=implied["marlin_of_bf16_peak"])
    prefill = fc.whole_model(fc.GB10, replace(eff, marlin=marlin)).prefill_tok_s["fp8_marlin"]
    assert prefill == pytest.approx(fc.REFERENCE["fp8_marlin"][0], rel=5e-3)
    gpu = replace(fc.GB10, bandwidth=implied["bandwidth_gb_s"] * 1e9)
    decode = fc.whole_model(gpu, eff).decode_tok_s["fp8_marlin"]
    assert decode == pytest.approx(fc.REFERENCE["fp8_marlin"][1], rel=5e-3)
    # a slower Marlin pulls the crossover down, a slower memory pushes it up
    low, high = fc.band(fc.GB10, eff, fc.SERVED_SHAPES)
    if implied["marlin_of_bf16_peak"] < eff.marlin.compute:
        assert implied["crossover_band_at_that_marlin"][1] < low
    else:
        assert implied["crossover_band_at_that_marlin"][0] > low
    assert implied["bandwidth_gb_s"] < fc.GB10.bandwidth / 1e9
    assert implied["crossover_band_at_that_bandwidth"][0] > high


def test_errors_are_against_a_figure_or_the_middle_of_a_range() -> None:
    assert fc.error_pct(110.0, 100.0) == 10.0
    assert fc.error_pct(34.45, 32.8, 36.1) == 0.0


def test_shapes_can_be_given(capsys) -> None:
    assert fc.main(["--shapes", "4096x4096, 1024X2048"]) == 0
    out = capsys.readouterr().out
    assert "| 4096x4096 | 1 |" in out and "| 1024x2048 | 8192 |" in out
    assert "7168x5120" not in out.split("crossover M:")[1].splitlines()[0]


def test_the_default_shapes_are_the_calibrations() -> None:
    from vllm_dualpath.calibrate import SHAPES

    assert [(shape.n, shape.k) for shape in SHAPES] == list(fc.SHAPES)


def test_the_reference_figures_are_the_benchmark_roles(monkeypatch) -> None:
    path = REPO / "roles/pair_benchmark/module_utils/pair_benchmark/reference.py"
    spec = importlib.util.spec_from_file_location("pair_benchmark_reference", path)
    assert spec is not None and spec.loader is not None
    reference = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, reference)  # its dataclasses look themselves up
    spec.loader.exec_module(reference)
    roles = {c.name: (c.reference_low, c.reference_high) for c in reference.CASES}
    assert {name: roles[name] for name in fc.CASES} == fc.CASES
    table = [
        tuple(float(cell.split()[0].replace(",", "")) for cell in row[1:])
        for row in reference.REFERENCE_PRECISION_TABLE
    ]
    assert table == list(fc.REFERENCE.values())


def test_the_served_inventory_is_its_mlps_and_lm_head_counted_per_layer() -> None:
    layers = {layer.name: (layer.n, layer.k, layer.calls) for layer in (*fc.TRUNK, *fc.MTP_BLOCK)}
    assert layers == {
        "dense_gate_up": (12288, 4096, 3),
        "dense_down": (4096, 6144, 3),
        "shared_gate_up": (2048, 4096, 42),
        "shared_down": (4096, 1024, 42),
        "mtp_shared_gate_up": (2048, 4096, 1),
        "mtp_shared_down": (4096, 1024, 1),
    }
    assert (fc.LM_HEAD.name, fc.LM_HEAD.n, fc.LM_HEAD.k) == ("lm_head", 77440, 4096)
    # vLLM builds GLM-5-Next's KDA and MLA projections in BF16: none of them is an FP8 layer
    assert all(name.startswith(("dense_", "shared_", "mtp_shared_")) for name in layers)
    derived = rank_shapes(GLM53_FLASH, fc.TENSOR_PARALLEL)
    assert list(fc.SERVED_SHAPES) == [(shape.n, shape.k) for shape in derived]
    weights = sum(n * k * calls for n, k, calls in layers.values()) + 77440 * 4096
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert committed["served_fp8_weights_per_rank"] == weights


def test_the_forecast_reads_the_served_config_the_shape_tests_use() -> None:
    assert fc.SERVED_CONFIG == GLM53_FLASH
    assert fc.SERVED_CONFIG["architectures"] == ["Glm5NextForCausalLM"]
    assert len(fc.SERVED_CONFIG["mlp_layer_types"]) == fc.SERVED_CONFIG["num_hidden_layers"] == 45


def test_an_architecture_with_fp8_attention_is_refused() -> None:
    config = {key: value for key, value in GLM53_FLASH.items() if key != "architectures"}
    with pytest.raises(ValueError, match=r"kv_b_proj .* not an MLP or the LM head"):
        fc.inventory(config, 2)


def test_layer_counts_follow_the_mlp_layer_types() -> None:
    config = {
        **GLM53_FLASH,
        "mlp_layer_types": ["dense"] * 5 + ["sparse"] * 39 + ["dense"],
        "num_nextn_predict_layers": 2,
    }
    found = fc.inventory(config, 2)
    assert [(layer.name, layer.calls) for layer in found.trunk] == [
        ("dense_gate_up", 6),
        ("dense_down", 6),
        ("shared_gate_up", 39),
        ("shared_down", 39),
    ]
    # MTP layers take the last layer's MLP, as vLLM builds them
    assert [(layer.name, layer.calls) for layer in found.mtp_block] == [
        ("mtp_dense_gate_up", 2),
        ("mtp_dense_down", 2),
    ]
    no_mtp = fc.inventory({**GLM53_FLASH, "num_nextn_predict_layers": 0}, 2)
    assert no_mtp.mtp_block == ()
    with pytest.raises(ValueError, match="one entry per hidden layer"):
        fc.inventory({**GLM53_FLASH, "num_hidden_layers": 46}, 2)
    # a dense MLP as wide as the shared expert: one shape, whose two counts cannot be told apart
    with pytest.raises(ValueError, match="shared_down, shared_gate_up: shares its shape"):
        fc.inventory({**GLM53_FLASH, "intermediate_size": 2048}, 2)
    with pytest.raises(ValueError, match="mlp_layer_types must list"):
        fc.inventory({**GLM53_FLASH, "mlp_layer_types": ["dense", "moe"]}, 2)


def test_only_the_mlps_and_lm_head_change_between_the_rows(eff) -> None:
    """The whole-model rows differ by the FP8 layers' time alone: the BF16 attention is in the
    fitted constant of every configuration."""
    whole = fc.whole_model(fc.GB10, eff)
    for config, path in fc.CONFIGURATIONS.items():
        step = fc.TOKENS_PER_STEP / whole.decode_tok_s[config]
        assert step - whole.other_step_s == pytest.approx(
            fc.dense_s(fc.GB10, eff, path, fc.decode_calls())
        )


def test_the_reference_decode_gain_is_beyond_the_fp8_layers_at_gb10_peak() -> None:
    """What the doc states: even with every FP8 layer free, a step saves at most the BF16 read
    of their weights at the GB10's full bandwidth, which is short of the FP8-only row."""
    weights = sum(layer.calls * layer.n * layer.k for layer, _ in fc.decode_calls())
    most_saved = 2 * weights / fc.GB10.bandwidth
    bf16_step = fc.TOKENS_PER_STEP / fc.REFERENCE["bf16"][1]
    assert fc.TOKENS_PER_STEP / (bf16_step - most_saved) < fc.REFERENCE["fp8_marlin"][1]
