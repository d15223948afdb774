"""Contract with the real vLLM sources of every tested version (read with ast, nothing built)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

from vllm_dualpath import plugin
from vllm_sources import VERSIONS, method, module_path, parse, sources, top_level

PACKAGE_ROOT = Path(__file__).resolve().parents[1]

# What each version's apply_fp8_marlin_linear takes (a drift here needs a look at op.py).
EXPECTED_PARAMETERS = {
    "0.33.0": (*plugin.LEADING_PARAMETERS, "input_dtype", "use_fp32_reduce"),
    "0.34.0": (*plugin.LEADING_PARAMETERS, "use_fp32_reduce"),
}


def _stub_with_signature(function: ast.FunctionDef):
    """A real Python function with the parameters (names, kinds, defaults present) of a def."""
    arguments = function.args
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        arg.annotation = None
    arguments.defaults = [ast.Constant(None) for _ in arguments.defaults]
    arguments.kw_defaults = [
        None if d is None else ast.Constant(None) for d in arguments.kw_defaults
    ]
    stub = ast.FunctionDef(
        name=function.name,
        args=arguments,
        body=[ast.Pass()],
        decorator_list=[],
        returns=None,
        type_params=[],
    )
    namespace: dict = {}
    exec(compile(ast.fix_missing_locations(ast.Module([stub], [])), "<stub>", "exec"), namespace)
    return namespace[function.name]


def _calls_of(tree: ast.AST, name: str) -> list[ast.Call]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
    ]


def _importers(root: Path, name: str) -> dict[str, ast.Module]:
    found = {}
    for path in sorted((root / "vllm").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if name not in text:
            continue
        tree = ast.parse(text, str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and any(a.name == name for a in node.names):
                module = ".".join(path.relative_to(root).with_suffix("").parts)
                assert node.module == plugin.SOURCE_MODULE, (
                    f"{module} imports {name} from {node.module}"
                )
                found[module] = tree
    return found


@pytest.mark.parametrize("version", VERSIONS)
def test_apply_function_exists_with_the_parameters_the_wrapper_expects(version):
    tree = parse(sources(version), plugin.SOURCE_MODULE)
    function = top_level(tree, plugin.FUNCTION_NAME)
    assert isinstance(function, ast.FunctionDef)
    stub = _stub_with_signature(function)
    optional = plugin.check_signature(stub)
    names = tuple(a.arg for a in function.args.args)
    assert names == EXPECTED_PARAMETERS[version]
    assert set(optional) == set(names) - set(plugin.LEADING_PARAMETERS)


@pytest.mark.parametrize("version", VERSIONS)
def test_kernel_apply_weights_calls_the_function_by_its_imported_name(version):
    root = sources(version)
    tree = parse(root, plugin.KERNEL_MODULE)
    kernel = top_level(tree, plugin.KERNEL_CLASS)
    assert isinstance(kernel, ast.ClassDef)
    apply_weights = method(kernel, plugin.KERNEL_METHOD)
    assert [a.arg for a in apply_weights.args.args] == ["self", "layer", "x", "bias"]
    calls = _calls_of(apply_weights, plugin.FUNCTION_NAME)
    assert len(calls) == 1
    assert plugin.KERNEL_MODULE in _importers(root, plugin.FUNCTION_NAME)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_call_site_passes_arguments_the_wrapper_accepts(version):
    root = sources(version)
    function = top_level(parse(root, plugin.SOURCE_MODULE), plugin.FUNCTION_NAME)
    accepted = {a.arg for a in function.args.args}
    importers = _importers(root, plugin.FUNCTION_NAME)
    assert importers, "nothing imports the apply function by name"
    call_count = 0
    for module, tree in importers.items():
        for call in _calls_of(tree, plugin.FUNCTION_NAME):
            call_count += 1
            assert len(call.args) <= len(plugin.LEADING_PARAMETERS), f"{module}: positional call"
            keywords = {k.arg for k in call.keywords}
            assert None not in keywords, f"{module}: **kwargs call"
            assert keywords <= accepted, f"{module}: unknown keywords {keywords - accepted}"
    assert call_count >= 1


@pytest.mark.parametrize("version", VERSIONS)
def test_the_set_of_modules_importing_the_function_is_the_known_one(version):
    """register() rebinds whatever imported it; a new importer is a change worth reviewing."""
    assert set(_importers(sources(version), plugin.FUNCTION_NAME)) == {plugin.KERNEL_MODULE}


@pytest.mark.parametrize("version", VERSIONS)
def test_marlin_format_facts_the_unpack_relies_on(version):
    root = sources(version)
    utils = module_path(root, "vllm.model_executor.layers.quantization.utils.marlin_utils")
    text = utils.read_text(encoding="utf-8")
    for fact in (
        "GPTQ_MARLIN_TILE = 16",
        "scale_perm_single.extend([2 * i + j for j in [0, 1, 8, 9, 16, 17, 24, 25]])",
        "scale_perm.extend([i + 8 * j for j in range(8)])",
        "(round_up(size_n, 64), round_up(size_k, math.lcm(128, group)))",
        "(round_up(size_n, 128), round_up(size_k, math.lcm(64, group)))",
    ):
        assert fact in text, f"marlin_utils.py of {version} no longer has {fact!r}"
    fp8 = module_path(root, plugin.SOURCE_MODULE).read_text(encoding="utf-8")
    for fact in (
        "exponent_bias = 2 ** (target_exponent - 1) - 2 ** (fp8_exponent - 1)",
        "marlin_scales = marlin_permute_scales(",
        "bias = marlin_permute_bias(marlin_pad_dim(layer.bias, part_size_n, padded_n))",
    ):
        assert fact in fp8, f"marlin_utils_fp8.py of {version} no longer has {fact!r}"


@pytest.mark.parametrize("version", VERSIONS)
def test_vllm_loads_general_plugins_from_the_entry_point_group_we_declare(version):
    tree = parse(sources(version), "vllm.plugins.__init__")
    group = top_level(tree, "DEFAULT_PLUGINS_GROUP")
    assert isinstance(group, ast.Assign) and isinstance(group.value, ast.Constant)
    declared = tomllib.loads((PACKAGE_ROOT / "pyproject.toml").read_text())["project"][
        "entry-points"
    ]
    assert group.value.value in declared
    assert declared[group.value.value] == {"dualpath": "vllm_dualpath.plugin:register"}
