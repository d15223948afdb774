"""A stand-in vLLM package tree for CPU tests, assembled from the real sdist's own code.

vLLM cannot be installed here (it needs CUDA builds), so the tests write a small ``vllm`` package
whose FP8 Marlin apply path is the *real* source text of the tested version:
``apply_fp8_marlin_linear`` and the helpers it calls from ``marlin_utils``, and
``MarlinFP8ScaledMMLinearKernel.apply_weights``. Only what needs CUDA is replaced: the
``torch.ops.vllm.marlin_gemm`` kernel (by the CPU arithmetic in ``marlin_standin``),
``should_use_atomic_add_reduce`` and ``scalar_types``. ``mismatch`` fabricates a vLLM whose
internals differ, to check that the plugin then leaves it alone.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import torch

from marlin_standin import reference_linear
from vllm_dualpath.plugin import KERNEL_MODULE, SOURCE_MODULE
from vllm_sources import module_path, parse, top_level

UTILS_MODULE = "vllm.model_executor.layers.quantization.utils.marlin_utils"
LEGACY_IMPORTER = "vllm.model_executor.layers.quantization.fp8"
MISMATCHES = ("missing-function", "renamed-parameter", "extra-parameter", "kernel-bypass")

marlin_gemm_calls: list[int] = []
_library: torch.library.Library | None = None


def _marlin_gemm_standin(
    a,
    b_q_weight,
    b_bias,
    b_scales,
    a_scales=None,
    global_scale=None,
    b_zeros=None,
    workspace=None,
    b_q_type_id=0,
    size_m=0,
    size_n=0,
    size_k=0,
    use_atomic_add=False,
    use_fp32_reduce=True,
):
    marlin_gemm_calls.append(size_m)
    return reference_linear(a, b_q_weight, b_scales, size_n, size_k, b_bias)


def define_marlin_gemm_standin() -> None:
    """torch.ops.vllm.marlin_gemm for the CPU, accepting both versions' keyword arguments."""
    global _library
    if _library is not None:
        return
    _library = torch.library.Library("vllm", "FRAGMENT")
    _library.define(
        "marlin_gemm(Tensor a, Tensor b_q_weight, Tensor? b_bias, Tensor b_scales, "
        "Tensor? a_scales=None, Tensor? global_scale=None, Tensor? b_zeros=None, "
        "Tensor? workspace=None, int b_q_type_id=0, int size_m=0, int size_n=0, int size_k=0, "
        "bool use_atomic_add=False, bool use_fp32_reduce=True) -> Tensor"
    )
    _library.impl("marlin_gemm", _marlin_gemm_standin, "CPU")


def _segment(source: str, node: ast.AST) -> str:
    segment = ast.get_source_segment(source, node, padded=True)
    assert segment is not None
    decorators = getattr(node, "decorator_list", [])
    if decorators:
        first = min(d.lineno for d in decorators)
        lines = source.splitlines()[first - 1 : node.lineno - 1]
        segment = "\n".join(lines) + "\n" + segment
    return textwrap.dedent(segment)


def _real(sources: Path, module: str, name: str) -> str:
    path = module_path(sources, module)
    text = path.read_text(encoding="utf-8")
    return _segment(text, top_level(parse(sources, module), name))


def _real_method(sources: Path, module: str, cls: str, name: str) -> str:
    text = module_path(sources, module).read_text(encoding="utf-8")
    class_node = top_level(parse(sources, module), cls)
    assert isinstance(class_node, ast.ClassDef)
    for node in class_node.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return _segment(text, node)
    raise AssertionError(f"{cls}.{name} not found")


def _write(root: Path, module: str, text: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in path.relative_to(root).parents:
        if str(parent) != ".":
            init = root / parent / "__init__.py"
            if not init.exists():
                init.write_text("")
    path.write_text(text)


def build(
    root: Path, version: str, sources: Path, mismatch: str | None = None, legacy: bool = False
) -> None:
    """Write the stand-in tree under root (put root on sys.path to import it)."""
    _write(root, "vllm.__init__", f'__version__ = "{version}"\n')
    _write(
        root,
        "vllm.scalar_type",
        textwrap.dedent("""
        from types import SimpleNamespace

        scalar_types = SimpleNamespace(float8_e4m3fn=SimpleNamespace(id=0))
    """),
    )
    helpers = [
        _real(sources, UTILS_MODULE, name)
        for name in (
            "GPTQ_MARLIN_TILE",
            "USE_FP32_REDUCE_DEFAULT",
            "marlin_repacked_nk",
            "marlin_pad_dim",
            "marlin_unpad_output",
        )
    ]
    _write(
        root,
        UTILS_MODULE,
        "import torch\n\n"
        + "\n\n".join(helpers)
        + textwrap.dedent("""

        def should_use_atomic_add_reduce(m, n, k, device, dtype):
            return False
    """),
    )

    apply_source = _real(sources, SOURCE_MODULE, "apply_fp8_marlin_linear")
    if mismatch == "missing-function":
        apply_source = apply_source.replace(
            "def apply_fp8_marlin_linear(", "def apply_fp8_marlin_gemm("
        )
    elif mismatch == "renamed-parameter":
        apply_source = apply_source.replace(
            "workspace: torch.Tensor | None,", "scratch: torch.Tensor | None,"
        )
        apply_source = apply_source.replace("workspace=workspace", "workspace=scratch")
    elif mismatch == "extra-parameter":
        apply_source = apply_source.replace(
            "bias: torch.Tensor | None,", "bias: torch.Tensor | None,\n    alpha: float,"
        )
    _write(
        root,
        SOURCE_MODULE,
        textwrap.dedent("""
        import torch

        from vllm.model_executor.layers.quantization.utils.marlin_utils import (
            USE_FP32_REDUCE_DEFAULT,
            marlin_pad_dim,
            marlin_repacked_nk,
            marlin_unpad_output,
            should_use_atomic_add_reduce,
        )
        from vllm.scalar_type import scalar_types


    """)
        + apply_source,
    )

    if legacy:
        # Older layout: no kernel classes; a quantization method imported the function by name.
        _write(
            root,
            LEGACY_IMPORTER,
            textwrap.dedent(f"""
            from {SOURCE_MODULE} import apply_fp8_marlin_linear


            def apply(layer, x, bias=None):
                return apply_fp8_marlin_linear(
                    input=x, weight=layer.weight, weight_scale=layer.weight_scale,
                    workspace=None, size_n=layer.output_size_per_partition,
                    size_k=layer.input_size_per_partition, bias=bias,
                )
        """),
        )
        return

    apply_weights = _real_method(
        sources, KERNEL_MODULE, "MarlinFP8ScaledMMLinearKernel", "apply_weights"
    )
    if mismatch == "kernel-bypass":
        apply_weights = apply_weights.replace(
            "return apply_fp8_marlin_linear(", "return _other_apply("
        )
    block_scale_name = _real_method(
        sources, KERNEL_MODULE, "MarlinFP8ScaledMMLinearKernel", "_block_scale_name"
    )
    body = textwrap.indent(block_scale_name + "\n" + apply_weights, "    ")
    imported = (
        "apply_fp8_marlin_gemm as apply_fp8_marlin_linear"
        if mismatch == "missing-function"
        else "apply_fp8_marlin_linear"
    )
    _write(
        root,
        KERNEL_MODULE,
        textwrap.dedent(f"""
        import torch

        from {SOURCE_MODULE} import {imported}

        _other_apply = apply_fp8_marlin_linear


        class MarlinFP8ScaledMMLinearKernel:
            def __init__(self, block_quant):
                self.block_quant = block_quant
                self.marlin_input_dtype = None

    """)
        + body,
    )
