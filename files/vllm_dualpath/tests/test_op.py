"""The dual-path op: M dispatch, both unpack modes, fallbacks, fake implementation."""

from __future__ import annotations

import pytest
import torch

from fp8_cases import Case, build
from marlin_standin import reference_linear
from vllm_dualpath import ahead, calibration, op, scratch, settings

pytestmark = pytest.mark.interpreter


def _call(case: Case, m: int, dtype=torch.bfloat16, with_bias=True, leading=()):
    _, packed, stored, stored_bias = build(case)
    generator = torch.Generator().manual_seed(m)
    x = torch.randn(*leading, m, case.size_k, generator=generator).to(dtype)
    bias = stored_bias if with_bias else None
    out = torch.ops.dualpath.fp8_marlin_linear(
        x, packed, stored, None, case.size_n, case.size_k, bias, True
    )
    expected = reference_linear(
        x.reshape(-1, case.size_k), packed, stored, case.size_n, case.size_k, bias
    ).reshape(*leading, m, case.size_n)
    return out, expected


def _close(out: torch.Tensor, expected: torch.Tensor) -> None:
    # Different summation orders: allow a couple of BF16 ulps of the output's magnitude.
    torch.testing.assert_close(
        out.float(), expected.float(), rtol=2**-7, atol=1e-2 * expected.float().abs().max().item()
    )


@pytest.mark.parametrize("m", [1, 7, 20])
def test_small_m_calls_marlin_unchanged(marlin, m):
    out, expected = _call(Case(100, 300, "channel"), m)
    assert marlin.calls == [m]
    assert torch.equal(out, expected)


@pytest.mark.parametrize(
    "case", [Case(100, 300, "channel"), Case(200, 300, "block"), Case(64, 128, "tensor")], ids=str
)
@pytest.mark.parametrize("mode", ["epilogue", "unpack"])
def test_large_m_unpacks_and_matches_marlins_arithmetic(marlin, case, mode):
    op.configure(settings.load({"DUALPATH_CHANNEL_SCALE": mode}), None)
    out, expected = _call(case, 1024, leading=(2,))
    assert marlin.calls == []
    assert out.shape == (2, 1024, case.size_n) and out.dtype == torch.bfloat16
    _close(out, expected)
    assert scratch.total_bytes(torch.device("cpu")) >= 2 * case.size_n * case.size_k


def test_epilogue_mode_rounds_once_like_marlin_on_channel_scales(marlin):
    """With exact weights and an fp32 accumulator, only the summation order differs."""
    op.configure(settings.load({"DUALPATH_CHANNEL_SCALE": "epilogue"}), None)
    out, expected = _call(Case(64, 128, "channel"), 1100, with_bias=False)
    differing = (out != expected).float().mean().item()
    assert differing < 0.02


def test_between_thresholds_the_table_decides(marlin):
    case = Case(100, 300, "channel")
    table = calibration.parse({"format": 1, "shapes": [{"n": 100, "k": 300, "unpack_from_m": 200}]})
    op.configure(settings.load({}), table)
    _call(case, 199)
    assert marlin.calls == [199]
    out, expected = _call(case, 200)
    assert marlin.calls == [199]
    _close(out, expected)
    op.configure(settings.load({}), None)
    _call(case, 1023)
    assert marlin.calls == [199, 1023]


def test_a_measured_shape_decides_above_the_large_threshold_too(marlin):
    case = Case(100, 300, "channel")
    shape = {"n": 100, "k": 300, "unpack_from_m": 2048}
    table = calibration.parse({"format": 1, "shapes": [shape]})
    op.configure(settings.load({}), table)
    _call(case, 1500)
    assert marlin.calls == [1500]
    out, expected = _call(case, 2048)
    assert marlin.calls == [1500]
    _close(out, expected)
    _call(Case(64, 128, "channel"), 1500)  # not measured: the fixed threshold applies
    assert marlin.calls == [1500]


def test_thresholds_come_from_settings(marlin):
    op.configure(settings.load({"DUALPATH_SMALL_M_MAX": "4", "DUALPATH_LARGE_M_MIN": "8"}), None)
    _call(Case(64, 128, "channel"), 8)
    _call(Case(64, 128, "channel"), 4)
    assert marlin.calls == [4]


def test_fp16_activations_stay_on_marlin(marlin):
    _call(Case(64, 128, "channel"), 2048, dtype=torch.float16)
    assert marlin.calls == [2048]


def test_capture_without_scratch_falls_back_to_marlin(marlin, monkeypatch):
    monkeypatch.setattr(scratch, "capturing", lambda device: True)
    out, expected = _call(Case(64, 128, "channel"), 2048)
    assert marlin.calls == [2048]
    assert torch.equal(out, expected)


def test_without_an_installed_marlin_the_error_says_so(marlin):
    op.install_marlin_apply(None)
    with pytest.raises(RuntimeError, match="no Marlin apply installed"):
        _call(Case(64, 128, "channel"), 1)


def test_opcheck_schema_fake_and_dispatch(marlin):
    _, packed, stored, stored_bias = build(Case(100, 300, "block"))
    for m in (3, 1500):
        x = torch.randn(m, 300).to(torch.bfloat16)
        torch.library.opcheck(
            torch.ops.dualpath.fp8_marlin_linear.default,
            (x, packed, stored, None, 100, 300, stored_bias, True),
            test_utils=("test_schema", "test_faketensor"),
        )


def test_branch_survives_compilation_with_dynamic_m(marlin):
    """Compiled once, the op still picks its path per call (the branch is inside the op)."""
    case = Case(64, 128, "channel")
    _, packed, stored, stored_bias = build(case)

    def layer(x):
        return torch.ops.dualpath.fp8_marlin_linear(
            x, packed, stored, None, 64, 128, stored_bias, True
        )

    compiled = torch.compile(layer, backend="aot_eager", dynamic=True, fullgraph=True)
    compiled(torch.randn(5, 128).to(torch.bfloat16))
    compiled(torch.randn(1500, 128).to(torch.bfloat16))
    compiled(torch.randn(6, 128).to(torch.bfloat16))
    assert marlin.calls == [5, 6]


@pytest.mark.parametrize("inference_first", [True, False])
@pytest.mark.parametrize("unpack_ahead", ["1", "0"])
def test_calls_in_and_out_of_inference_mode_share_the_scratch(
    marlin, inference_first, unpack_ahead
):
    """vLLM's forward runs under torch.inference_mode, so its weights and the scratch buffers
    grown there are inference tensors; calibration and benchmarks call outside that mode."""
    op.configure(settings.load({"DUALPATH_UNPACK_AHEAD": unpack_ahead}), None)
    cases = [Case(200, 300, "block"), Case(128, 256, "channel", seed=1)]
    for inference in (inference_first, not inference_first):
        for _ in range(2):
            for case in cases:
                with torch.inference_mode(inference):
                    out, expected = _call(case, 1024)
                assert out.is_inference() == inference
                _close(out, expected)
    assert marlin.calls == []


def test_unpack_ahead_hits_in_a_compiled_module_under_inference_mode(marlin):
    """As vLLM runs a model: parameters, torch.compile, inference mode. A hit needs the very
    weight tensors a prefetch read, so the compiled graph must hand the op its parameters."""
    op.configure(settings.load({"DUALPATH_UNPACK_AHEAD_MIN_M": "1024"}), None)
    cases = [Case(128, 256, "block"), Case(256, 128, "block", seed=1)]

    class Stack(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = []
            for index, case in enumerate(cases):
                _, packed, stored, _ = build(case)
                self.register_parameter(f"w{index}", torch.nn.Parameter(packed, False))
                self.register_parameter(f"s{index}", torch.nn.Parameter(stored, False))
                self.layers.append(case)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for index, case in enumerate(self.layers):
                x = torch.ops.dualpath.fp8_marlin_linear(
                    x[:, : case.size_k],
                    getattr(self, f"w{index}"),
                    getattr(self, f"s{index}"),
                    None,
                    case.size_n,
                    case.size_k,
                    None,
                    True,
                )
            return x

    stack = Stack()
    compiled = torch.compile(stack, backend="aot_eager", dynamic=True, fullgraph=True)
    x = torch.randn(1024, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with torch.inference_mode():
        expected = stack(x)
        outputs = [compiled(x) for _ in range(3)]
    for out in outputs:
        assert torch.equal(out.view(torch.int16), expected.view(torch.int16))
    stats = ahead.for_device(torch.device("cpu")).stats
    assert stats.hits >= 3  # the second layer of every pass after the first
    assert marlin.calls == []
