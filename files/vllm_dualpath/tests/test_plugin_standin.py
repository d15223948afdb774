"""register() against stand-in vLLM trees built from each tested version's real code."""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import vllm_sources
import vllm_standin_tree
from fp8_cases import Case, build
from marlin_standin import reference_linear
from vllm_dualpath import op, plugin, scratch, settings
from vllm_dualpath.plugin import KERNEL_MODULE, SOURCE_MODULE
from vllm_sources import VERSIONS, sources

pytestmark = pytest.mark.interpreter


def _forget_vllm() -> None:
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture
def standin(tmp_path, monkeypatch):
    """Returns build(version, **options): writes the tree and puts it on sys.path."""
    vllm_standin_tree.define_marlin_gemm_standin()
    # Every overlay setting, so none leaks in from the shell; not where the tests find vLLM.
    harness = {vllm_sources.ALLOW_MISSING, vllm_sources.SDIST_DIR}
    for variable in [v for v in os.environ if v.startswith("DUALPATH_") and v not in harness]:
        monkeypatch.delenv(variable)
    _forget_vllm()
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    vllm_standin_tree.marlin_gemm_calls.clear()
    monkeypatch.setattr(plugin, "_warned", False)

    def make(version: str, **options):
        vllm_standin_tree.build(tmp_path, version, sources(version), **options)
        return tmp_path

    yield make
    plugin.unregister()
    op.configure(settings.load({}), None)
    scratch.release_all()
    _forget_vllm()


def _layer(case: Case):
    _, packed, stored, stored_bias = build(case)
    fields = dict(
        weight=packed, output_size_per_partition=case.size_n, input_size_per_partition=case.size_k
    )
    fields["weight_scale_inv" if case.scales == "block" else "weight_scale"] = stored
    return SimpleNamespace(**fields), stored_bias


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", [Case(100, 300, "channel"), Case(200, 300, "block")], ids=str)
def test_register_routes_the_real_apply_weights_through_the_op(standin, version, case):
    standin(version)
    kernel_module = importlib.import_module(KERNEL_MODULE)
    source_module = importlib.import_module(SOURCE_MODULE)
    original = source_module.apply_fp8_marlin_linear

    plugin.register()
    route = plugin.registered_route()
    assert route is not None and route.via_kernel_class and route.vllm_version == version
    assert kernel_module.apply_fp8_marlin_linear is route.wrapper
    assert source_module.apply_fp8_marlin_linear is route.wrapper
    assert route.original is original

    kernel = kernel_module.MarlinFP8ScaledMMLinearKernel(block_quant=case.scales == "block")
    layer, bias = _layer(case)
    small = torch.randn(2, 5, case.size_k).to(torch.bfloat16)
    out_small = kernel.apply_weights(layer, small, bias)
    assert vllm_standin_tree.marlin_gemm_calls == [10]
    assert out_small.shape == (2, 5, case.size_n)

    large = torch.randn(1024, case.size_k).to(torch.bfloat16)
    out_large = kernel.apply_weights(layer, large, bias)
    assert vllm_standin_tree.marlin_gemm_calls == [10]
    expected = reference_linear(
        large,
        layer.weight,
        getattr(layer, "weight_scale_inv", getattr(layer, "weight_scale", None)),
        case.size_n,
        case.size_k,
        bias,
    )
    torch.testing.assert_close(
        out_large.float(),
        expected.float(),
        rtol=2**-7,
        atol=1e-2 * expected.float().abs().max().item(),
    )

    plugin.unregister()
    assert kernel_module.apply_fp8_marlin_linear is original
    assert source_module.apply_fp8_marlin_linear is original


@pytest.mark.parametrize("version", VERSIONS)
def test_older_layout_rebinds_every_module_that_imported_the_function(standin, version):
    standin(version, legacy=True)
    importer = importlib.import_module(vllm_standin_tree.LEGACY_IMPORTER)
    plugin.register()
    route = plugin.registered_route()
    assert route is not None and not route.via_kernel_class
    assert importer.apply_fp8_marlin_linear is route.wrapper
    layer, bias = _layer(Case(64, 128, "channel"))
    importer.apply(layer, torch.randn(3, 128).to(torch.bfloat16), bias)
    importer.apply(layer, torch.randn(2000, 128).to(torch.bfloat16), bias)
    assert vllm_standin_tree.marlin_gemm_calls == [3]


def _snapshot():
    modules = {
        name: vars(sys.modules[name]).copy()
        for name in (SOURCE_MODULE, KERNEL_MODULE)
        if name in sys.modules
    }
    return modules


@pytest.mark.parametrize("mismatch", vllm_standin_tree.MISMATCHES)
def test_mismatched_vllm_is_left_untouched_with_one_warning(standin, mismatch, caplog):
    standin(VERSIONS[-1], mismatch=mismatch)
    importlib.import_module(KERNEL_MODULE)
    before = _snapshot()
    with caplog.at_level(logging.WARNING, logger="vllm.dualpath"):
        plugin.register()
        plugin.register()
    warnings = [
        r for r in caplog.records if r.name == "vllm.dualpath" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1
    assert "left unchanged" in warnings[0].getMessage()
    expected_words = {
        "missing-function": "apply_fp8_marlin_linear is missing",
        "renamed-parameter": "expected it to start with",
        "extra-parameter": "unknown parameter 'alpha'",
        "kernel-bypass": "no longer calls apply_fp8_marlin_linear",
    }[mismatch]
    assert expected_words in warnings[0].getMessage()
    assert plugin.registered_route() is None
    after = _snapshot()
    assert after.keys() == before.keys()
    for name, namespace in before.items():
        assert after[name].keys() == namespace.keys()
        assert all(after[name][key] is value for key, value in namespace.items())
    assert op._marlin_apply is None


@pytest.mark.parametrize("mismatch", ["renamed-parameter", "kernel-bypass"])
def test_strict_mode_refuses_to_start_on_a_mismatch(standin, mismatch, monkeypatch):
    standin(VERSIONS[0], mismatch=mismatch)
    monkeypatch.setenv("DUALPATH_STRICT", "1")
    with pytest.raises(plugin.IncompatibleVllmError, match="DUALPATH_STRICT=1"):
        plugin.register()
    assert plugin.registered_route() is None


def test_missing_vllm_warns_and_strict_raises(standin, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING, logger="vllm.dualpath"):
        plugin.register()
    assert "vllm is not importable" in caplog.text
    monkeypatch.setenv("DUALPATH_STRICT", "true")
    with pytest.raises(plugin.IncompatibleVllmError):
        plugin.register()


def test_disabled_changes_nothing(standin, monkeypatch):
    standin(VERSIONS[0])
    monkeypatch.setenv("DUALPATH_ENABLED", "0")
    plugin.register()
    assert plugin.registered_route() is None
    module = importlib.import_module(SOURCE_MODULE)
    assert module.apply_fp8_marlin_linear.__module__ == SOURCE_MODULE


def test_disabled_reads_no_other_setting(standin, monkeypatch):
    """DUALPATH_ENABLED=0 leaves vLLM untouched, whatever the other settings hold."""
    standin(VERSIONS[0])
    monkeypatch.setenv("DUALPATH_ENABLED", "0")
    monkeypatch.setenv("DUALPATH_CALIBRATION_TABLE", "/nonexistent/table.json")
    monkeypatch.setenv("DUALPATH_LARGE_M_MIN", "lots")
    plugin.register()
    assert plugin.registered_route() is None


def test_invalid_setting_stops_startup_naming_the_variable(standin, monkeypatch):
    standin(VERSIONS[0])
    monkeypatch.setenv("DUALPATH_LARGE_M_MIN", "lots")
    with pytest.raises(settings.SettingsError, match="DUALPATH_LARGE_M_MIN"):
        plugin.register()


def test_calibration_table_from_the_environment_reaches_the_op(standin, monkeypatch, tmp_path):
    standin(VERSIONS[0])
    table = tmp_path / "gpu.json"
    table.write_text('{"format": 1, "shapes": [{"n": 4096, "k": 4096, "unpack_from_m": 300}]}')
    monkeypatch.setenv("DUALPATH_CALIBRATION_TABLE", str(table))
    plugin.register()
    assert plugin.registered_route() is not None
    assert op.choose_path(299, 4096, 4096) == "marlin"
    assert op.choose_path(300, 4096, 4096) == "unpack"
    assert op.choose_path(300, 1024, 4096) == "marlin"


def test_malformed_calibration_table_leaves_the_thresholds_unless_strict(
    standin, monkeypatch, tmp_path, caplog
):
    standin(VERSIONS[0])
    table = tmp_path / "broken-table.json"
    table.write_text('{"format": 1, "shapes": [{"n": 1}]}')
    monkeypatch.setenv("DUALPATH_CALIBRATION_TABLE", str(table))
    plugin.register()
    assert plugin.registered_route() is not None
    assert "broken-table" in caplog.text
    assert op.choose_path(1024, 4096, 4096) == "unpack"  # the large-M threshold


def test_malformed_calibration_table_stops_a_strict_startup_naming_the_file(
    standin, monkeypatch, tmp_path
):
    standin(VERSIONS[0])
    table = tmp_path / "broken-table.json"
    table.write_text('{"format": 1, "shapes": [{"n": 1}]}')
    monkeypatch.setenv("DUALPATH_CALIBRATION_TABLE", str(table))
    monkeypatch.setenv("DUALPATH_STRICT", "1")
    with pytest.raises(ValueError, match="broken-table"):
        plugin.register()
    assert plugin.registered_route() is None


COMPILE_SCRIPT = """
import importlib, json
import torch
import vllm_standin_tree
from fp8_cases import Case, build
from vllm_dualpath import plugin

vllm_standin_tree.define_marlin_gemm_standin()
plugin.register()
kernel = importlib.import_module(plugin.KERNEL_MODULE).MarlinFP8ScaledMMLinearKernel(False)
_, packed, stored, bias = build(Case(64, 128, "channel"))
layer = type("Layer", (), dict(weight=packed, weight_scale=stored,
                               output_size_per_partition=64, input_size_per_partition=128))()

def forward(x):
    return kernel.apply_weights(layer, x, bias)

compiled = torch.compile(forward, backend="aot_eager", fullgraph=True, dynamic=True)
shapes = [list(compiled(torch.randn(m, 128).to(torch.bfloat16)).shape) for m in (5, 1500, 6)]
print(json.dumps({"shapes": shapes, "marlin_calls": vllm_standin_tree.marlin_gemm_calls}))
"""


@pytest.mark.parametrize("version", VERSIONS)
def test_routed_apply_weights_compiles_as_one_graph_and_still_dispatches(standin, version):
    """vLLM compiles the model with fullgraph: the wrapper must trace without graph breaks.

    Runs in a fresh interpreter: dynamo keeps references to the modules it traced, which these
    tests replace between cases.
    """
    root = standin(version)
    tests = Path(__file__).resolve().parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUALPATH_")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (root, tests, tests.parent / "src")))
    result = subprocess.run(
        [sys.executable, "-c", COMPILE_SCRIPT],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found == {"shapes": [[5, 64], [1500, 64], [6, 64]], "marlin_calls": [5, 6]}
