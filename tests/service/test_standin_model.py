"""The stand-in's model runs the overlay's real op, patched into the lab vllm tree by its plugin.

The model and the plugin run in subprocesses on this venv's torch and triton (the Triton unpack
under TRITON_INTERPRET=1), with the lab vllm tree staged as lab/standin_context.py stages it
into the image. Outputs are held to what the overlay's own tests hold its op to
(files/vllm_dualpath/tests/test_op.py): the Marlin path bit for bit equal to Marlin's
arithmetic, the unpack path within a couple of BF16 ulps of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm_standin import model

from lab import standin_context
from tests.helpers import REPO
from tests.service.standin_pair import STANDIN, Pair

OVERLAY_SRC = REPO / "files/vllm_dualpath/src"
PROBE = Path(__file__).with_name("standin_model_probe.py")
ROUTED = "routed through torch.ops.dualpath.fp8_marlin_linear"
LARGE_M = 1024  # DUALPATH_LARGE_M_MIN's default


@pytest.fixture(scope="module")
def lab_vllm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return standin_context.stage_lab_vllm(tmp_path_factory.mktemp("image") / "lab_vllm")


def environment(*path: Path, **extra: str) -> dict[str, str]:
    """A clean environment: no DUALPATH_* setting leaks in from the shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DUALPATH_", "PYTHON"))}
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(map(str, path)),
        "TRITON_INTERPRET": "1",
        **extra,
    }


@pytest.fixture(scope="module")
def probe(lab_vllm: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("probe")
    result = subprocess.run(
        [sys.executable, str(PROBE), str(out)],
        env=environment(OVERLAY_SRC, lab_vllm, STANDIN),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found: dict[str, Any] = json.loads((out / "probe.json").read_text(encoding="utf-8"))
    found["log"] = result.stderr
    found["tensors"] = torch.load(out / "cases.pt")
    return found


def test_the_plugin_patches_the_lab_vllm_tree(probe: dict[str, Any]) -> None:
    route = probe["route"]
    assert route is not None, probe["log"]
    assert route["version"] == "0.34.0"
    assert route["via_kernel_class"]
    assert route["original_is_lab_function"]
    assert route["source_is_wrapper"] and route["kernel_is_wrapper"]
    assert route["modules"] == sorted([model.SOURCE_MODULE, model.KERNEL_MODULE])
    assert ROUTED in probe["log"]
    assert "left unchanged" not in probe["log"] and "WARNING" not in probe["log"]
    assert "apply_fp8_marlin_linear is the dual-path overlay's wrapper" in probe["log"]


def test_small_m_takes_the_marlin_path_and_large_m_the_unpack_path(
    probe: dict[str, Any],
) -> None:
    assert len(probe["calls"]) == len(model.LAYERS) * 3
    for call in probe["calls"]:
        path = "unpack" if call["m"] >= LARGE_M else "marlin"
        assert call["delta"] == {"marlin": int(path == "marlin"), "unpack": int(path == "unpack")}


@pytest.mark.parametrize("case", range(len(model.LAYERS) * 3))
def test_outputs_are_marlins_arithmetic(probe: dict[str, Any], case: int) -> None:
    call, tensors = probe["calls"][case], probe["tensors"][case]
    output, expected = tensors["output"], tensors["expected"]
    assert output.dtype == torch.bfloat16 and output.shape == expected.shape
    assert expected.isfinite().all()
    if call["m"] < LARGE_M:
        # The Marlin path is vLLM's own apply: the reference, bit for bit.
        assert torch.equal(output, expected)
    else:
        # Another summation order; test_op.py's bound for the unpack path.
        torch.testing.assert_close(
            output.float(),
            expected.float(),
            rtol=2**-7,
            atol=1e-2 * expected.float().abs().max().item(),
        )


def test_a_request_is_a_prefill_then_one_step_per_further_token(probe: dict[str, Any]) -> None:
    layers = len(model.LAYERS)
    small, large = probe["forwards"]
    assert small == {"tokens": 5, "max_tokens": 3, "marlin": layers * 3, "unpack": 0}
    assert large == {"tokens": 1024, "max_tokens": 2, "marlin": layers, "unpack": layers}


def test_request_work_is_read_like_vllm_reads_it() -> None:
    assert model.Work.of_request("a b  c", {}) == model.Work(3, model.DEFAULT_MAX_TOKENS)
    assert model.Work.of_request("a", {"max_tokens": None}).max_tokens == 16
    assert model.Work.of_request("a", {"max_tokens": 1}).decode_steps == 0
    assert model.Work.of_request("a", {"max_tokens": 10_000}).decode_steps == (
        model.MAX_DECODE_STEPS
    )
    for bad in (0, -1, 2.5, "8", True):
        with pytest.raises(ValueError, match="max_tokens"):
            model.Work.of_request("a", {"max_tokens": bad})
    work = model.Work(7, 9)
    assert model.Work.of_message({"type": "shard", **work.to_message()}) == work


def run_model(script: str, *path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "import logging\nlogging.basicConfig()\n" + script],
        env=environment(*path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_the_lab_vllm_the_model_says_so_loudly() -> None:
    result = run_model(
        "from vllm_standin import model\nassert model.load() is None\nmodel.run(model.Work(3, 2))",
        OVERLAY_SRC,
        STANDIN,
    )
    assert result.returncode == 0, result.stderr
    assert "ERROR:vllm.standin.model:stand-in model NOT loaded" in result.stderr
    assert "No module named 'vllm'" in result.stderr
    assert "WARNING:vllm.standin.model:stand-in model not loaded" in result.stderr
    assert "request ran no FP8 layer" in result.stderr


def test_without_the_plugin_the_model_says_nothing_is_routed(lab_vllm: Path) -> None:
    result = run_model(
        "from vllm_standin import model\nassert model.load() is not None\n"
        "model.run(model.Work(3, 2))",
        OVERLAY_SRC,
        lab_vllm,
        STANDIN,
    )
    assert result.returncode == 0, result.stderr
    assert "WARNING:vllm.standin.model:stand-in model: apply_fp8_marlin_linear is NOT patched" in (
        result.stderr
    )


def overlay_entry_point(root: Path) -> Path:
    """The overlay's entry point as its release's .dist-info declares it (its sources on the
    path beside it), so the stand-in loads the real plugin the way vLLM does."""
    info = root / "vllm_dualpath-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm-dualpath\nVersion: 0.1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[vllm.general_plugins]\ndualpath = vllm_dualpath.plugin:register\n", encoding="utf-8"
    )
    return root


def stats(directory: Path, want: dict[str, int], timeout_s: float = 15) -> list[dict[str, int]]:
    """Each rank's counts from its stats file, once every file shows ``want``."""
    deadline = time.monotonic() + timeout_s
    found: list[dict[str, int]] = []
    while time.monotonic() < deadline:
        files = sorted(directory.glob("*.json"))
        found = [json.loads(f.read_text(encoding="utf-8"))["calls"] for f in files]
        if len(found) == 2 and all(calls == want for calls in found):
            break
        time.sleep(0.3)
    return found


@pytest.fixture
def pair(tmp_path: Path, lab_vllm: Path) -> Iterator[Pair]:
    plugin_path = overlay_entry_point(tmp_path / "overlay")
    path = os.pathsep.join(map(str, (STANDIN, plugin_path, OVERLAY_SRC, lab_vllm)))
    env = {
        "PYTHONPATH": path,
        "VLLM_PLUGINS": "dualpath",
        "TRITON_INTERPRET": "1",
        "DUALPATH_STATS_DIR": str(tmp_path / "stats"),
    }
    started = Pair(tmp_path, None, env)
    yield started
    started.stop()


ON_MARLIN = ("--linear-backend", "marlin")


def test_both_ranks_serve_every_request_through_the_overlay(pair: Pair, tmp_path: Path) -> None:
    pair.start(1, serve_args=ON_MARLIN)
    pair.start(0, serve_args=ON_MARLIN)
    pair.wait_ready(timeout_s=60)
    body = {"model": "test-model", "prompt": "2+2=", "max_tokens": 4}
    status, answer = pair.call("/v1/completions", body)
    assert status == 200, answer
    layers = len(model.LAYERS)
    assert (
        stats(tmp_path / "stats", {"marlin": layers * 4, "unpack": 0})
        == [{"marlin": layers * 4, "unpack": 0}] * 2
    )
    long_prompt = " ".join(["word"] * LARGE_M)
    status, answer = pair.call(
        "/v1/completions", {"model": "test-model", "prompt": long_prompt, "max_tokens": 1}
    )
    assert status == 200, answer
    want = {"marlin": layers * 4, "unpack": layers}
    assert stats(tmp_path / "stats", want) == [want] * 2
    status, answer = pair.call("/v1/completions", {**body, "max_tokens": 0})
    assert status == 400 and "max_tokens" in answer["error"]
    for rank in pair.ranks.values():
        assert ROUTED in rank.output()
        assert "apply_fp8_marlin_linear is the dual-path overlay's wrapper" in rank.output()


def test_without_marlin_as_the_linear_backend_no_call_reaches_the_overlay(
    pair: Pair, tmp_path: Path
) -> None:
    # vLLM's default ("auto") picks the GPU's own FP8 kernels: the overlay sits idle.
    pair.start(1)
    pair.start(0)
    pair.wait_ready(timeout_s=60)
    long_prompt = " ".join(["word"] * LARGE_M)
    body = {"model": "test-model", "prompt": long_prompt, "max_tokens": 4}
    status, answer = pair.call("/v1/completions", body)
    assert status == 200, answer
    time.sleep(2)  # the overlay writes its counts within about a second of a call
    assert list((tmp_path / "stats").glob("*.json")) == []
