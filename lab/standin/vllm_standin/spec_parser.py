"""vLLM's `vllm serve` parser, rebuilt without vLLM from lab/vllm_cli_spec.py's option table.

The table is made from the pinned vLLM at image build (never committed: it is vLLM's output) and
lies beside this module in the image; on a checkout it is .cache/lab/vllm-serve-cli.json.

lab/vllm_cli_spec.py dumps every action of the real parser (option strings, hidden ones too;
nargs, const, default, choices, required) with its `type` named by kind. Each kind is turned
back here into a converter that accepts and rejects the strings vLLM's own does
(vllm/engine/arg_utils.py and vllm/utils/argparse_utils.py of the spec's version), so argparse
itself gives the stand-in vLLM's abbreviations, unknown-option and bad-value errors.
Where the stand-in cannot know what vLLM would check (pydantic validation of a config's nested
fields), it checks what it can: JSON syntax, an object, and the config's top-level keys.
"""

from __future__ import annotations

import argparse
import json
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SPEC_NAME = "serve_cli_spec.json"
# In the image, beside this module; in a checkout (host-side tests), where the lab makes it.
SPEC_PATH = next(
    (
        path
        for path in (
            Path(__file__).with_name(SPEC_NAME),
            Path(__file__).resolve().parents[3] / ".cache/lab/vllm-serve-cli.json",
        )
        if path.is_file()
    ),
    Path(__file__).with_name(SPEC_NAME),
)
PYTHON_VALUE = "__python__"  # lab/vllm_cli_spec.py's marker for a value JSON cannot carry
Converter = Callable[[str], Any]


class PythonValue:
    """A default the spec could only name (a config object, a set, an enum)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def load_spec(path: Path = SPEC_PATH) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return spec


def decode(value: Any) -> Any:
    if value == argparse.SUPPRESS:  # argparse tests it by identity, not equality
        return argparse.SUPPRESS
    if isinstance(value, dict) and set(value) == {PYTHON_VALUE}:
        return PythonValue(value[PYTHON_VALUE])
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


# ---- vLLM's converters, restated (same names: argparse puts them in its error messages) -------


def human_readable_int(value: str) -> int:
    """'1k' -> 1000, '1K' -> 1024, '25.6k' -> 25600 (argparse_utils.human_readable_int)."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        try:
            return int(number) * binary[suffix]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"{value}: a binary suffix ({suffix}) takes a whole number"
            ) from exc
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    value = value.strip()
    if value == "-1" or value.lower() == "auto":
        return -1
    return human_readable_int(value)


def expand_json_human_readable_numbers(val: str) -> str:
    """Bare 80m / 1K tokens outside JSON strings become integers (arg_utils, same name)."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', val)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(
            r"\b\d+(?:\.\d+)?[kKmMgGtT]\b",
            lambda m: str(human_readable_int(m.group())),
            parts[i],
        )
    return "".join(parts)


def parse_type(return_type: Converter) -> Converter:
    def _parse_type(val: str) -> Any:
        try:
            return return_type(val)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{val!r} is not a {return_type}") from exc

    return _parse_type


def optional_type(return_type: Converter) -> Converter:
    def _optional_type(val: str) -> Any:
        if val == "" or val == "None":
            return None
        return parse_type(return_type)(val)

    return _optional_type


def union_dict_and_str(val: str) -> Any:
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return optional_type(json.loads)(val)


def parse_reasoning_parser(val: str) -> str:
    return "" if val.lower() == "none" else val


def dataclass_type(name: str, fields: Sequence[str], extra: str) -> Converter:
    """pydantic's TypeAdapter(<config>).validate_json, as far as it can be told without it."""
    known = set(fields)

    def parse_dataclass(val: str) -> Any:
        try:
            value = json.loads(expand_json_human_readable_numbers(val))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{name}: invalid JSON: {exc}") from exc
        if not isinstance(value, dict):
            raise argparse.ArgumentTypeError(f"{name}: Input should be an object")
        unknown = sorted(set(value) - known) if extra == "forbid" else []
        if unknown:
            raise argparse.ArgumentTypeError(f"{name}: Unexpected keyword argument {unknown}")
        return value

    return parse_dataclass


def lower_snake(s: str) -> str:  # --moe-backend, --linear-backend: `lambda s: s.lower()...`
    return s.lower().replace("-", "_")


def device_ids(s: str) -> list[int | str]:
    return [int(d) if d.isdigit() else d for d in (part.strip() for part in s.split(","))]


PLAIN: dict[str, Converter] = {
    "str": str,
    "int": int,
    "float": float,
    "json": json.loads,
    "human_readable_int": human_readable_int,
    "human_readable_int_or_auto": human_readable_int_or_auto,
    "union_dict_and_str": union_dict_and_str,
    "reasoning_parser": parse_reasoning_parser,
    "lower_snake": lower_snake,
    "device_ids": device_ids,
}


def converter(kind: dict[str, Any] | None) -> Converter | None:
    if kind is None:
        return None
    name = kind["kind"]
    if name in PLAIN:
        return PLAIN[name]
    if name in ("optional", "parse_type"):
        inner = converter(kind["inner"])
        assert inner is not None, kind
        return optional_type(inner) if name == "optional" else parse_type(inner)
    if name == "dataclass":
        return dataclass_type(kind["name"], kind["fields"], kind["extra"])
    # "other": a converter the spec could not name; tests/service/test_standin.py forbids it.
    return str


# ---- vLLM's own actions ------------------------------------------------------------------------


class EnableDisableAction(argparse.Action):
    """--enable-x / --disable-x (and --no-...) set one bool (argparse_utils.EnableDisableAction)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        negative_option_strings: Sequence[str] = (),
        **kw: Any,
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, **kw)
        self.negative_option_strings = set(negative_option_strings)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        setattr(namespace, self.dest, option not in self.negative_option_strings)


class LoRAModulesAction(argparse.Action):
    """name=path or a JSON object per item (cli_args.LoRAParserAction)."""

    def __init__(
        self, *args: Any, fields: Sequence[str] = (), required_fields: Sequence[str] = (), **kw: Any
    ) -> None:
        super().__init__(*args, **kw)
        self.fields, self.required_fields = set(fields), set(required_fields)

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        if values is None:
            values = []
        if isinstance(values, str):
            raise TypeError("Expected values to be a list")
        modules: list[dict[str, Any]] = []
        for item in values:
            if item in (None, ""):
                continue
            if "=" in item and "," not in item:
                name, path = item.split("=", 1)
                modules.append({"name": name, "path": path})
                continue
            try:
                module = json.loads(item)
            except json.JSONDecodeError:
                parser.error(f"Invalid JSON format for --lora-modules: {item}")
            keys = set(module) if isinstance(module, dict) else set()
            if not isinstance(module, dict) or keys - self.fields or self.required_fields - keys:
                parser.error(f"Invalid fields for --lora-modules: {item}")
            modules.append(module)
        setattr(namespace, self.dest, modules)


class StoreWarnAction(argparse._StoreAction):
    """Store, warning that the option is deprecated (arg_utils.DeprecatedLogConfigFileAction)."""

    def __init__(self, *args: Any, message: str = "", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.message = message

    def __call__(self, parser: Any, namespace: Any, values: Any, option: Any = None) -> None:
        warnings.warn(self.message, stacklevel=1)
        setattr(namespace, self.dest, values)


def add_action(parser: argparse.ArgumentParser, spec: dict[str, Any]) -> argparse.Action:
    """Add one spec action to the parser with the same behaviour as vLLM's."""
    kind = spec["action"]
    common: dict[str, Any] = {"dest": spec["dest"], "default": decode(spec["default"])}
    if spec["option_strings"]:
        common["required"] = spec["required"]
    else:  # a positional's dest is its name
        common.pop("dest")
    valued = {
        "nargs": spec["nargs"],
        "const": decode(spec["const"]),
        "type": converter(spec["type"]),
        "choices": decode(spec["choices"]),
    }
    names = spec["option_strings"] or [spec["dest"]]
    if kind == "help":
        return parser.add_argument(*names, action="help", help=argparse.SUPPRESS)
    if kind in ("store", "append"):
        if spec["nargs"] != "?":
            valued.pop("const")
        return parser.add_argument(*names, action=kind, **common, **valued)
    if kind in ("store_true", "store_false", "count"):
        return parser.add_argument(*names, action=kind, **common)
    if kind in ("store_const", "append_const"):
        return parser.add_argument(*names, action=kind, const=valued["const"], **common)
    if kind == "enable_disable":
        negative = spec["negative_option_strings"]
        return parser.add_argument(
            *names, action=EnableDisableAction, negative_option_strings=negative, **common
        )
    if kind == "lora_modules":
        return parser.add_argument(
            *names,
            action=LoRAModulesAction,
            fields=spec["fields"],
            required_fields=spec["required_fields"],
            nargs=spec["nargs"],
            type=valued["type"],
            **common,
        )
    if kind == "store_warn":
        return parser.add_argument(
            *names, action=StoreWarnAction, message=spec["message"], **common
        )
    raise ValueError(f"{SPEC_NAME}: unknown action kind {kind!r} for {spec['dest']}")
