"""The custom op inside torch.compile (one graph for every M) and inside CUDA-graph capture."""

from __future__ import annotations

import pytest
import torch
from overlay_setup import default_thresholds, force

from vllm_dualpath import scratch
from vllm_dualpath.marlin_reference import (
    prepare_fp8_for_marlin,
    random_fp8_weight,
    random_scales,
)

N, K = 3072, 2048


@pytest.fixture
def layer(generator):
    weight = random_fp8_weight(N, K, "cuda", generator)
    return prepare_fp8_for_marlin(
        weight, random_scales(N, K, (128, 128), "cuda", generator), (128, 128)
    )


def _op(layer, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.dualpath.fp8_marlin_linear(
        x, layer.qweight, layer.scales, None, N, K, None, True
    )


def _path_output(layer, x: torch.Tensor, path: str) -> torch.Tensor:
    force(path)
    out = _op(layer, x)
    default_thresholds()
    return out


def test_compiled_op_dispatches_on_m_at_run_time(layer, generator) -> None:
    default_thresholds()

    def forward(x: torch.Tensor) -> torch.Tensor:
        return _op(layer, x) * 2

    compiled = torch.compile(forward, fullgraph=True, dynamic=True)
    first = torch.randn(37, K, device="cuda", generator=generator).to(torch.bfloat16)
    torch._dynamo.mark_dynamic(first, 0)
    compiled(first)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for m, path in (
            (2, "marlin"),
            (16, "marlin"),
            (300, "marlin"),
            (2048, "unpack"),
            (4096, "unpack"),
        ):
            x = torch.randn(m, K, device="cuda", generator=generator).to(torch.bfloat16)
            got = compiled(x)
            expected = _path_output(layer, x, path) * 2
            assert torch.equal(got, expected), f"M={m}: compiled op did not take the {path} path"


@pytest.mark.parametrize("m", [1, 4, 16])
def test_small_m_replays_inside_a_cuda_graph(layer, generator, m) -> None:
    default_thresholds()
    static_x = torch.randn(m, K, device="cuda", generator=generator).to(torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _op(layer, static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _op(layer, static_x)
    for _ in range(3):
        static_x.copy_(torch.randn(m, K, device="cuda", generator=generator))
        graph.replay()
        expected = _path_output(layer, static_x, "marlin")
        assert torch.equal(static_out, expected), "graph replay differs from an eager Marlin call"


def test_large_m_graph_uses_unpack_when_scratch_is_ready(layer, generator) -> None:
    default_thresholds()
    m = 2048
    static_x = torch.randn(m, K, device="cuda", generator=generator).to(torch.bfloat16)
    _op(layer, static_x)  # grows the scratch buffer outside capture, as vLLM's profile run does
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _op(layer, static_x)
    static_x.copy_(torch.randn(m, K, device="cuda", generator=generator))
    graph.replay()
    assert torch.equal(static_out, _path_output(layer, static_x, "unpack"))


def test_capture_with_too_small_scratch_falls_back_to_marlin(layer, generator) -> None:
    default_thresholds()
    scratch.release_all()
    m = 2048
    static_x = torch.randn(m, K, device="cuda", generator=generator).to(torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _op(layer, static_x[:1])  # warm Marlin only; the scratch stays empty
    torch.cuda.current_stream().wait_stream(side)
    assert scratch.capacity(static_x.device) == 0
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _op(layer, static_x)
    graph.replay()
    assert scratch.capacity(static_x.device) == 0, "capture must not allocate the scratch"
    assert torch.equal(static_out, _path_output(layer, static_x, "marlin"))
