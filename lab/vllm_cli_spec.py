"""The real `vllm serve` command line, read out of vLLM itself, for the lab's stand-in.

The stand-in image cannot import vLLM, so the serve parser's option table (and vLLM's known
environment variable names) is dumped to JSON at SPEC_PATH under .cache (never committed), copied
into the image and rebuilt into an argparse parser there (lab/standin/vllm_standin).

    python lab/vllm_cli_spec.py write   # main venv: (re)make the parser venv, regenerate SPEC_PATH
    python lab/vllm_cli_spec.py check   # main venv: exit 1 when SPEC_PATH differs from vLLM's
    python lab/vllm_cli_spec.py ensure  # main venv: write SPEC_PATH when it is missing
    VENV/bin/python lab/vllm_cli_spec.py dump    # print the spec (needs vLLM importable)
    VENV/bin/python lab/vllm_cli_spec.py parse   # stdin: JSON list of argv lists (after
                                                 # `vllm serve`); stdout: JSON results
    VENV/bin/python lab/vllm_cli_spec.py report  # both at once: {"spec": ..., "parsed": ...}

`dump` and `parse` run in the dedicated venv (lab/vllm_cli_venv.py), with the standard library
and vLLM alone; `parse` builds the parser as `vllm serve` does, the stand-in tests' reference.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SPEC_PATH = REPO / ".cache/lab/vllm-serve-cli.json"
# A value JSON cannot carry (a config object, a set, an enum): kept as its type's name only.
PYTHON_VALUE = "__python__"


def _venv_module() -> Any:
    try:
        from lab import vllm_cli_venv
    except ImportError:  # run as lab/vllm_cli_spec.py, with lab/ itself on the path
        import vllm_cli_venv  # type: ignore[no-redef]
    return vllm_cli_venv


# ---- inside the parser venv (vLLM importable) ------------------------------------------------


def real_serve_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser, Any]:
    """The top-level `vllm` parser with its serve subparser, as vllm.entrypoints.cli.main builds."""
    import importlib.metadata

    import vllm.platforms

    # Building the parser instantiates config defaults that infer a device type; the `empty`
    # platform of a GPU-less install cannot ("Failed to infer device type").
    vllm.platforms.current_platform.device_type = "cpu"
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # prog: what argparse takes from sys.argv[0] when the `vllm` entry point runs.
    top = FlexibleArgumentParser(prog="vllm", description="vLLM CLI")
    top.add_argument(
        "-v", "--version", action="version", version=importlib.metadata.version("vllm")
    )
    subparsers = top.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    serve = command.subparser_init(subparsers)
    serve.set_defaults(dispatch_function=command.cmd)
    return top, serve, command


def encode(value: Any) -> Any:
    """JSON for a value that round-trips exactly, else {PYTHON_VALUE: type name}."""
    try:
        if json.loads(json.dumps(value)) == value:
            return value
    except (TypeError, ValueError):
        pass
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    return {PYTHON_VALUE: type(value).__name__}


def _closure(function: Callable[..., Any]) -> dict[str, Any]:
    cells = function.__closure__ or ()
    return dict(zip(function.__code__.co_freevars, (c.cell_contents for c in cells), strict=True))


def _dataclass_kind(cls: type) -> dict[str, Any]:
    """parse_dataclass: a JSON object validated by pydantic; extra='forbid' rejects unknown keys."""
    pydantic_fields = getattr(cls, "__pydantic_fields__", None)
    names: set[str] = set()
    if pydantic_fields is not None:
        for name, info in pydantic_fields.items():
            names.add(name)
            for alias in (info.alias, info.validation_alias):
                if isinstance(alias, str):
                    names.add(alias)
                elif alias is not None:  # AliasChoices/AliasPath: accept what they name first
                    names.update(str(choice) for choice in getattr(alias, "choices", ()))
    else:
        names = {field.name for field in dataclasses.fields(cls) if field.init}
    config = getattr(cls, "__pydantic_config__", {}) or {}
    return {
        "kind": "dataclass",
        "name": cls.__name__,
        "extra": str(config.get("extra") or "ignore"),
        "fields": sorted(names),
    }


def _lambda_kind(function: Callable[[str], Any]) -> dict[str, Any] | None:
    """vLLM's anonymous converters, recognised by what they do."""
    with contextlib.suppress(Exception):
        if function("Ab-C_d") == "ab_c_d" and function("X") == "x":
            return {"kind": "lower_snake"}  # --moe-backend, --linear-backend, ...
    with contextlib.suppress(Exception):
        if function("2, cuda:x") == [2, "cuda:x"]:
            return {"kind": "device_ids"}  # --device-ids
    return None


def type_kind(function: Callable[[str], Any] | None) -> dict[str, Any] | None:
    """Name an argparse `type` so the stand-in can convert (and reject) the same values."""
    if function is None:
        return None
    from vllm.engine import arg_utils
    from vllm.utils import argparse_utils

    named: dict[Any, str] = {
        str: "str",
        int: "int",
        float: "float",
        json.loads: "json",
        argparse_utils.human_readable_int: "human_readable_int",
        argparse_utils.human_readable_int_or_auto: "human_readable_int_or_auto",
        arg_utils.union_dict_and_str: "union_dict_and_str",
        arg_utils.parse_reasoning_parser: "reasoning_parser",
    }
    if function in named:
        return {"kind": named[function]}
    qualname = getattr(function, "__qualname__", "")
    if qualname == "optional_type.<locals>._optional_type":
        return {"kind": "optional", "inner": type_kind(_closure(function)["return_type"])}
    if qualname == "parse_type.<locals>._parse_type":
        return {"kind": "parse_type", "inner": type_kind(_closure(function)["return_type"])}
    if qualname.endswith("parse_dataclass") and getattr(function, "__defaults__", None):
        return _dataclass_kind(function.__defaults__[0])  # type: ignore[index]
    if qualname.endswith("<lambda>") and (kind := _lambda_kind(function)):
        return kind
    # Unknown to the stand-in: it would accept any string here; the spec test forbids this.
    return {"kind": "other", "name": f"{getattr(function, '__module__', '?')}.{qualname}"}


def action_kind(action: argparse.Action) -> dict[str, Any]:
    """The action's behaviour; an action class the stand-in cannot mimic stops the dump."""
    from vllm.engine.arg_utils import DeprecatedLogConfigFileAction
    from vllm.entrypoints.common.cli_args import LoRAParserAction
    from vllm.entrypoints.openai.models.protocol import LoRAModulePath
    from vllm.utils.argparse_utils import EnableDisableAction

    plain = {
        argparse._HelpAction: "help",
        argparse._StoreAction: "store",
        argparse._StoreTrueAction: "store_true",
        argparse._StoreFalseAction: "store_false",
        argparse._StoreConstAction: "store_const",
        argparse._AppendAction: "append",
        argparse._AppendConstAction: "append_const",
        argparse._CountAction: "count",
        argparse._VersionAction: "version",
    }
    cls = type(action)
    if cls in plain:
        return {"action": plain[cls]}
    if cls is EnableDisableAction:
        negative = sorted(action.negative_option_strings)  # type: ignore[attr-defined]
        return {"action": "enable_disable", "negative_option_strings": negative}
    if cls is argparse.BooleanOptionalAction:
        return {"action": "enable_disable", "negative_option_strings": []}
    if cls is LoRAParserAction:
        fields = dataclasses.fields(LoRAModulePath)
        missing = dataclasses.MISSING
        required = [f.name for f in fields if f.default is missing and f.default_factory is missing]
        return {
            "action": "lora_modules",
            "fields": sorted(f.name for f in fields),
            "required_fields": sorted(required),
        }
    if cls is DeprecatedLogConfigFileAction:
        from vllm.engine.arg_utils import _LOG_CONFIG_FILE_DEPRECATION_MESSAGE

        return {"action": "store_warn", "message": _LOG_CONFIG_FILE_DEPRECATION_MESSAGE}
    raise SystemExit(f"vllm_cli_spec: no stand-in equivalent for {cls.__module__}.{cls.__name__}")


def describe(parser: argparse.ArgumentParser, action: argparse.Action) -> dict[str, Any]:
    # Every registered option string, hidden ones too (EnableDisableAction keeps --no-enable-x
    # out of help but parses it); insertion order, which decides abbreviation error messages.
    strings = [s for s, a in parser._option_string_actions.items() if a is action]
    choices = action.choices
    if isinstance(choices, set | frozenset):
        choices = sorted(choices, key=repr)
    # Python < 3.13: FlexibleArgumentParser keeps them itself; 3.13+: argparse does.
    deprecated = action in getattr(parser, "_deprecated", ()) or getattr(action, "deprecated", None)
    return {
        "dest": action.dest,
        "option_strings": strings,
        **action_kind(action),
        "nargs": action.nargs,
        "const": encode(action.const),
        "default": encode(action.default),
        "required": action.required,
        "choices": None if choices is None else [encode(c) for c in choices],
        "type": type_kind(action.type),  # type: ignore[arg-type]
        "deprecated": bool(deprecated),
    }


def unknown_variable_message() -> str:
    """The warning vLLM logs for a VLLM_* variable it does not know, as its source spells it."""
    import inspect

    from vllm.platforms.interface import Platform

    source = inspect.getsource(Platform.validate_environ)
    found = re.search(r'"(Unknown vLLM environment variable detected: %s)"', source)
    if not found:
        raise SystemExit("vllm_cli_spec: Platform.validate_environ no longer warns as expected")
    return found.group(1)


def dump() -> dict[str, Any]:
    import importlib.metadata

    from vllm import envs

    _, serve, _ = real_serve_parser()
    return {
        "vllm_version": importlib.metadata.version("vllm"),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "generated_by": "lab/vllm_cli_spec.py write",
        "usage": serve.usage,
        "actions": [describe(serve, action) for action in serve._actions],
        "environment_variables": sorted(envs.environment_variables),
        "removed_environment_variables": dict(sorted(envs.removed_environment_variables.items())),
        "unknown_environment_variable_message": unknown_variable_message(),
    }


def parse_one(top: argparse.ArgumentParser, command: Any, argv: list[str]) -> dict[str, Any]:
    """What `vllm serve ARGV` does before loading anything: parse, then validate."""
    stderr = io.StringIO()
    code = 0
    values: dict[str, Any] = {}
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stderr):
        try:
            args = top.parse_args(["serve", *argv])
            command.validate(args)
            if args.model_tag is not None:  # ServeSubcommand.cmd's first step, as the stand-in
                args.model = args.model_tag
            values = {k: encode(v) for k, v in vars(args).items() if k != "dispatch_function"}
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # vLLM lets these escape: a traceback and exit status 1
            code = 1
            print("".join(traceback.format_exception_only(exc)).strip(), file=sys.stderr)
    return {"argv": argv, "exit": code, "stderr": stderr.getvalue(), "values": values}


def parse_many(argvs: list[list[str]]) -> list[dict[str, Any]]:
    top, _, command = real_serve_parser()
    return [parse_one(top, command, argv) for argv in argvs]


# ---- in the main venv ------------------------------------------------------------------------


def run_in_venv(mode: str, stdin: str = "") -> str:
    """Run this file's `dump`/`parse` with the parser venv's python (made first if needed)."""
    python = _venv_module().ensure()
    env = {**os.environ, "PYTHONHASHSEED": "0", "VLLM_LOGGING_LEVEL": "ERROR"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [str(python), str(Path(__file__).resolve()), mode],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"vllm_cli_spec {mode} failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


def format_spec(spec: dict[str, Any]) -> str:
    """One action or name per line: a vLLM bump then reads as a short diff."""
    lines = []
    for key, value in spec.items():
        if isinstance(value, list | dict) and value:
            items = value.items() if isinstance(value, dict) else enumerate(value)
            body = ",\n".join(
                ("  " + (f"{json.dumps(k)}: " if isinstance(value, dict) else ""))
                + json.dumps(item)
                for k, item in items
            )
            opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
            lines.append(f" {json.dumps(key)}: {opening}\n{body}\n {closing}")
        else:
            lines.append(f" {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def fresh_spec_text() -> str:
    return format_spec(json.loads(run_in_venv("dump")))


def write_spec() -> Path:
    """Dump the pinned vLLM's table to SPEC_PATH (replacing it whole); return the path."""
    SPEC_PATH.parent.mkdir(parents=True, exist_ok=True)
    partial = SPEC_PATH.with_name(SPEC_PATH.name + ".partial")
    partial.write_text(fresh_spec_text(), encoding="utf-8")
    partial.replace(SPEC_PATH)
    print(f"wrote {SPEC_PATH.relative_to(REPO)}")
    return SPEC_PATH


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("dump", "parse", "report", "write", "check", "ensure"))
    mode = parser.parse_args(argv).mode
    if mode == "dump":
        json.dump(dump(), sys.stdout)
    elif mode == "parse":
        json.dump(parse_many(json.load(sys.stdin)), sys.stdout)
    elif mode == "report":  # one vLLM import for a test session instead of two
        json.dump({"spec": dump(), "parsed": parse_many(json.load(sys.stdin))}, sys.stdout)
    elif mode == "write" or (mode == "ensure" and not SPEC_PATH.is_file()):
        write_spec()
    elif mode == "ensure":
        pass
    elif SPEC_PATH.read_text(encoding="utf-8") != fresh_spec_text():
        print(f"{SPEC_PATH.relative_to(REPO)} is stale: run python lab/vllm_cli_spec.py write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
