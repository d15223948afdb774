"""vLLM general plugin: route vLLM's FP8 Marlin dense apply through the dual-path op.

``register()`` runs in every vLLM process before the model loads. It rebinds
``apply_fp8_marlin_linear`` wherever vLLM bound it, after checking vLLM's internals are the ones
expected; otherwise it warns once and changes nothing (DUALPATH_STRICT=1: refuses to start).
Importing this module touches neither vLLM nor CUDA. Where the apply lives: the package README.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from vllm_dualpath import settings

logger = logging.getLogger("vllm.dualpath")

SOURCE_MODULE: Final = "vllm.model_executor.layers.quantization.utils.marlin_utils_fp8"
FUNCTION_NAME: Final = "apply_fp8_marlin_linear"
KERNEL_MODULE: Final = "vllm.model_executor.kernels.linear.scaled_mm.marlin"
KERNEL_CLASS: Final = "MarlinFP8ScaledMMLinearKernel"
KERNEL_METHOD: Final = "apply_weights"

# The leading parameters the op needs, in this order, in every supported version.
LEADING_PARAMETERS: Final = (
    "input",
    "weight",
    "weight_scale",
    "workspace",
    "size_n",
    "size_k",
    "bias",
)
# Trailing parameters known to come and go between versions (all with defaults).
OPTIONAL_PARAMETERS: Final = frozenset({"input_dtype", "use_fp32_reduce"})

# Versions whose sources the contract tests check; others are tried on structure alone.
TESTED_VLLM_VERSIONS: Final = ("0.33.0", "0.34.0")


class IncompatibleVllmError(RuntimeError):
    """vLLM's FP8 Marlin apply path is not what the overlay expects."""


@dataclass
class Route:
    """What register() found and changed."""

    original: Callable[..., Any]
    modules: list[ModuleType]
    via_kernel_class: bool
    vllm_version: str
    wrapper: Callable[..., Any] | None = field(default=None)


_route: Route | None = None
_warned = False


def check_signature(function: Callable[..., Any]) -> dict[str, Any]:
    """Defaults of the optional parameters; IncompatibleVllmError naming any surprise."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError) as error:
        raise IncompatibleVllmError(f"{SOURCE_MODULE}.{FUNCTION_NAME}: {error}") from error
    names = [p.name for p in parameters]
    leading = tuple(names[: len(LEADING_PARAMETERS)])
    if leading != LEADING_PARAMETERS:
        raise IncompatibleVllmError(
            f"{SOURCE_MODULE}.{FUNCTION_NAME} takes ({', '.join(names)}); expected it to start "
            f"with ({', '.join(LEADING_PARAMETERS)})"
        )
    optional: dict[str, Any] = {}
    for parameter in parameters[len(LEADING_PARAMETERS) :]:
        if parameter.name not in OPTIONAL_PARAMETERS:
            raise IncompatibleVllmError(
                f"{SOURCE_MODULE}.{FUNCTION_NAME} has an unknown parameter {parameter.name!r}"
            )
        if parameter.default is inspect.Parameter.empty:
            raise IncompatibleVllmError(
                f"{SOURCE_MODULE}.{FUNCTION_NAME} parameter {parameter.name!r} has no default"
            )
        optional[parameter.name] = parameter.default
    if any(p.kind not in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in parameters):
        raise IncompatibleVllmError(f"{SOURCE_MODULE}.{FUNCTION_NAME} takes *args or **kwargs")
    return optional


def _import(name: str) -> ModuleType | None:
    """The module, or None when it (not something it imports) does not exist."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name is not None and name.startswith(error.name):
            return None
        raise IncompatibleVllmError(f"importing {name} failed: {error}") from error
    except Exception as error:
        raise IncompatibleVllmError(f"importing {name} failed: {error!r}") from error


def find_route() -> Route:
    """Locate vLLM's FP8 Marlin apply and every binding of it; change nothing."""
    vllm = _import("vllm")
    if vllm is None:
        raise IncompatibleVllmError("vllm is not importable")
    version = str(getattr(vllm, "__version__", "unknown"))
    source = _import(SOURCE_MODULE)
    if source is None:
        raise IncompatibleVllmError(f"module {SOURCE_MODULE} is missing (vLLM {version})")
    candidate = getattr(source, FUNCTION_NAME, None)
    if not callable(candidate):
        raise IncompatibleVllmError(f"{SOURCE_MODULE}.{FUNCTION_NAME} is missing (vLLM {version})")
    original: Callable[..., Any] = candidate
    check_signature(original)

    kernel_module = _import(KERNEL_MODULE)
    via_kernel_class = kernel_module is not None
    if kernel_module is not None:
        kernel = getattr(kernel_module, KERNEL_CLASS, None)
        method = getattr(kernel, KERNEL_METHOD, None)
        if method is None:
            raise IncompatibleVllmError(
                f"{KERNEL_MODULE}.{KERNEL_CLASS}.{KERNEL_METHOD} is missing"
            )
        code = getattr(method, "__code__", None)
        if code is None or FUNCTION_NAME not in code.co_names:
            raise IncompatibleVllmError(
                f"{KERNEL_CLASS}.{KERNEL_METHOD} no longer calls {FUNCTION_NAME}"
            )
        if getattr(kernel_module, FUNCTION_NAME, None) is not original:
            raise IncompatibleVllmError(
                f"{KERNEL_MODULE}.{FUNCTION_NAME} is not {SOURCE_MODULE}.{FUNCTION_NAME}"
            )

    modules = [source]
    for name, module in list(sys.modules.items()):
        if module is source or not name.startswith("vllm.") or module is None:
            continue
        if getattr(module, FUNCTION_NAME, None) is original:
            modules.append(module)
    return Route(original, modules, via_kernel_class, version)


def make_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    """A function with original's parameters that calls the dual-path op."""
    import torch

    from vllm_dualpath import op

    optional = check_signature(original)
    use_fp32_reduce_default = optional.get("use_fp32_reduce", True)
    accepts_input_dtype = "input_dtype" in optional

    @functools.wraps(original)
    def routed(
        input: torch.Tensor,
        weight: torch.Tensor,
        weight_scale: torch.Tensor,
        workspace: torch.Tensor | None,
        size_n: int,
        size_k: int,
        bias: torch.Tensor | None = None,
        **optional_arguments: Any,
    ) -> torch.Tensor:
        unknown = set(optional_arguments) - set(optional)
        if unknown:
            raise TypeError(f"{FUNCTION_NAME}() got unexpected arguments {sorted(unknown)}")
        if accepts_input_dtype and optional_arguments.get("input_dtype") is not None:
            # Quantized activations are not a weight-only layer: vLLM's own code decides.
            result: torch.Tensor = original(
                input=input,
                weight=weight,
                weight_scale=weight_scale,
                workspace=workspace,
                size_n=size_n,
                size_k=size_k,
                bias=bias,
                **optional_arguments,
            )
            return result
        routed_result: torch.Tensor = torch.ops.dualpath.fp8_marlin_linear(
            input,
            weight,
            weight_scale,
            workspace,
            size_n,
            size_k,
            bias,
            bool(optional_arguments.get("use_fp32_reduce", use_fp32_reduce_default)),
        )
        return routed_result

    op.install_marlin_apply(original)
    return routed


def _apply(route: Route, wrapper: Callable[..., Any]) -> None:
    for module in route.modules:
        setattr(module, FUNCTION_NAME, wrapper)
    route.wrapper = wrapper


def unregister() -> None:
    """Put back vLLM's own function everywhere register() rebound it."""
    global _route
    if _route is None:
        return
    for module in _route.modules:
        if getattr(module, FUNCTION_NAME, None) is _route.wrapper:
            setattr(module, FUNCTION_NAME, _route.original)
    _route = None
    from vllm_dualpath import op

    op.install_marlin_apply(None)


def registered_route() -> Route | None:
    """The route register() applied in this process, if any."""
    return _route


def register() -> None:
    """vLLM plugin entry point; see the module docstring."""
    global _route, _warned
    if not settings.enabled():  # read alone: disabled, no other setting can stop startup
        logger.info("vllm-dualpath: disabled by %s", settings.ENABLED)
        return
    current = settings.load()  # an invalid value stops startup here, naming the variable
    if _route is not None:
        return
    try:
        route = find_route()
        from vllm_dualpath import calibration, op

        table = None
        if current.calibration_table is not None:
            table = calibration.load_for_service(current.calibration_table, current.strict)
        wrapper = make_wrapper(route.original)
    except IncompatibleVllmError as error:
        if current.strict:
            raise IncompatibleVllmError(f"vllm-dualpath ({settings.STRICT}=1): {error}") from error
        if not _warned:
            _warned = True
            logger.warning(
                "vllm-dualpath: %s; vLLM is left unchanged (FP8 layers keep Marlin only)", error
            )
        return
    op.configure(current, table)
    _apply(route, wrapper)
    _route = route
    if route.vllm_version not in TESTED_VLLM_VERSIONS:
        logger.info(
            "vllm-dualpath: vLLM %s is not one of the tested versions %s; its internals match",
            route.vllm_version,
            ", ".join(TESTED_VLLM_VERSIONS),
        )
    logger.info(
        "vllm-dualpath: %s routed through torch.ops.dualpath.fp8_marlin_linear in %d module(s)",
        FUNCTION_NAME,
        len(route.modules),
    )
