"""The package as vLLM meets it: an installed wheel, found through its entry point, holding the
package alone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import vllm_sources

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
# What every node loads: the plugin and what it runs at serve time, the calibration table's reader,
# and the calibration command the nodes run (with the timing and the Marlin-format layers it
# measures with). The benchmarks and their reports stay beside the package, in benchmarks/.
SHIPPED_MODULES = {
    "__init__",
    "ahead",
    "calibrate",
    "calibration",
    "calls",
    "crossover",
    "layout",
    "marlin_reference",
    "model_shapes",
    "op",
    "plugin",
    "scratch",
    "settings",
    "table_key",
    "timing",
    "unpack",
}


def _python(code: str, pythonpath: list[Path], cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUALPATH_")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package built as a wheel and installed into a fresh target directory."""
    work = tmp_path_factory.mktemp("wheel")
    # Build from a copy so no build/ or egg-info lands in the source tree.
    source = work / "source"
    shutil.copytree(
        PACKAGE_ROOT,
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*cache", "tests"),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(work / "dist"),
            str(source),
        ],
        check=True,
        timeout=300,
    )
    wheels = list((work / "dist").glob("vllm_dualpath-*.whl"))
    assert len(wheels) == 1
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(work / "site"),
            str(wheels[0]),
        ],
        check=True,
        timeout=300,
    )
    return work / "site"


def test_entry_point_of_the_installed_wheel_loads_register(installed, tmp_path):
    found = _python(
        """
        import json, sys
        from importlib.metadata import entry_points
        plugins = entry_points(group="vllm.general_plugins")
        register = plugins["dualpath"].load()
        print(json.dumps({
            "names": sorted(ep.name for ep in plugins),
            "qualname": register.__module__ + "." + register.__qualname__,
            "file": sys.modules[register.__module__].__file__,
            "heavy": sorted(m for m in ("torch", "triton", "vllm") if m in sys.modules),
        }))
        """,
        [installed],
        tmp_path,
    )
    assert found["names"] == ["dualpath"]
    assert found["qualname"] == "vllm_dualpath.plugin.register"
    assert Path(found["file"]).is_relative_to(installed)
    assert found["heavy"] == []  # loading the plugin imports neither torch, triton nor vLLM


def test_the_wheel_ships_the_package_modules_and_nothing_else(installed):
    (record,) = installed.glob("vllm_dualpath-*.dist-info/RECORD")
    files = [line.split(",")[0] for line in record.read_text().splitlines() if line]
    outside = [f for f in files if not f.startswith(("vllm_dualpath/", record.parent.name + "/"))]
    assert outside == []
    modules = {
        f.removeprefix("vllm_dualpath/").removesuffix(".py")
        for f in files
        if f.startswith("vllm_dualpath/") and f.endswith(".py")
    }
    assert modules == SHIPPED_MODULES


def test_no_benchmark_is_importable_from_the_installed_wheel(installed, tmp_path):
    benchmarks = sorted(path.stem for path in (PACKAGE_ROOT / "benchmarks").glob("*.py"))
    assert {"bench", "bench_model", "model_report"} <= set(benchmarks)
    found = _python(
        f"""
        import importlib.util, json
        names = [n for b in {benchmarks!r} for n in (b, "vllm_dualpath." + b)]
        print(json.dumps({{"importable": [n for n in names if importlib.util.find_spec(n)]}}))
        """,
        [installed],
        tmp_path,
    )
    assert found == {"importable": []}


def test_register_does_not_initialise_cuda(installed, tmp_path):
    """Routes vLLM (a stand-in tree from the real 0.34 code) with CUDA initialisation trapped."""
    import vllm_standin_tree

    version = vllm_sources.VERSIONS[-1]
    vllm_standin_tree.build(tmp_path / "standin", version, vllm_sources.sources(version))
    result = _python(
        """
        import json, torch
        def trap(*args, **kwargs):
            raise AssertionError("CUDA was initialised")
        torch.cuda._lazy_init = trap
        torch.cuda.init = trap
        from vllm_dualpath import plugin
        plugin.register()
        route = plugin.registered_route()
        print(json.dumps({"routed": route is not None,
                          "cuda": torch.cuda.is_initialized()}))
        """,
        [installed, tmp_path / "standin"],
        tmp_path,
    )
    assert result == {"routed": True, "cuda": False}


def test_missing_sources_fail_with_the_fetch_command(monkeypatch, tmp_path):
    monkeypatch.setenv(vllm_sources.SDIST_DIR, str(tmp_path))
    monkeypatch.delenv(vllm_sources.ALLOW_MISSING, raising=False)
    with pytest.raises(pytest.fail.Exception, match=r"fetch_vllm_sdists\.py"):
        vllm_sources.sources("0.33.0")
    monkeypatch.setenv(vllm_sources.ALLOW_MISSING, "1")
    with pytest.raises(pytest.skip.Exception, match=r"DUALPATH_ALLOW_MISSING_SDISTS=1"):
        vllm_sources.sources("0.33.0")
