"""What vLLM's FlexibleArgumentParser.parse_args does to the command line before argparse sees it.

Restated from vllm/utils/argparse_utils.py (the spec's version), quirks included: `vllm serve`
accepts `--max_model_len` for `--max-model-len`, `--model M` for the positional model,
`--compilation-config.mode 3` and `--x.key+ a,b` for JSON options, and `-O3`. A value that starts
with '-' and holds a '.' is taken for a dotted key, as in vLLM. The one thing the stand-in does
not do is read a `--config` YAML file (no YAML parser in its image): it refuses it instead.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections import defaultdict
from typing import Any

from vllm_standin.spec_parser import human_readable_int

logger = logging.getLogger("vllm.utils.argparse_utils")


class ConfigFileUnsupportedError(Exception):
    """`--config FILE`: vLLM would read it; the stand-in cannot."""


def _move_model_option(args: list[str]) -> list[str]:
    index = next((i for i, a in enumerate(args) if re.match(r"^--model(=.+|$)", a)), None)
    if index is None:
        return args
    logger.warning("vllm serve: --model is deprecated; give the model as the first argument")
    if args[index] == "--model":
        tag, rest = args[index + 1], index + 2
    else:
        tag, rest = args[index].removeprefix("--model="), index + 1
    return ["serve", tag, *args[1:index], *args[rest:]]


def _nested(keys: list[str], value: Any) -> Any:
    for key in reversed(keys):
        value = {key: value}
    return value


def _merge(original: dict[str, Any], update: dict[str, Any]) -> set[str]:
    duplicates: set[str] = set()
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            duplicates |= {f"{k}.{d}" for d in _merge(original[k], v)}
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            if k in original:
                duplicates.add(k)
            original[k] = v
    return duplicates


def _dashes(args: list[str]) -> list[str]:
    """Underscores to dashes in option names (up to the first '.'); -O<n>; --help=<topic>."""
    pattern = re.compile(r"(?<=--)[^\.]*")

    def repl(match: re.Match[str]) -> str:
        return match.group(0).replace("_", "-")

    processed: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--help="):
            processed.append("--help")
        elif arg.startswith("--"):
            if "=" in arg:
                key, value = arg.split("=", 1)
                processed.append(f"{pattern.sub(repl, key, count=1)}={value}")
            else:
                processed.append(pattern.sub(repl, arg, count=1))
        elif arg.startswith("-O") and arg != "-O":
            processed += ["--optimization-level", arg[3:] if arg[2] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"}:
            processed.append("--optimization-level")
        else:
            processed.append(arg)
    return processed


def _dotted(processed: list[str]) -> list[str]:
    """--a.b.c V and --a.b+ x,y become one `--a '{"b": ...}'` per option, appended at the end."""
    delete: set[int] = set()
    dict_args: defaultdict[str, dict[str, Any]] = defaultdict(dict)
    duplicates: set[str] = set()
    seen: set[str] = set()
    for i, arg in enumerate(processed):
        if i in delete:
            continue
        if arg.startswith("--") and "." not in arg:
            name = arg.split("=", 1)[0]
            (duplicates if name in seen else seen).add(name)
            continue
        if arg.startswith("-") and "." in arg:
            if "=" in arg:
                arg, value_str = arg.split("=", 1)
                if "." not in arg:
                    continue
            else:
                value_str = processed[i + 1]  # IndexError at the end, as in vLLM
                delete.add(i + 1)
            if arg.endswith("+"):
                arg = arg[:-1]
                value_str = json.dumps(value_str.split(","))
            key, *keys = arg.split(".")
            value: Any
            try:
                value = json.loads(value_str)
            except json.JSONDecodeError:
                try:
                    value = human_readable_int(value_str)
                except (ValueError, argparse.ArgumentTypeError):
                    value = value_str
            found = _merge(dict_args[key], _nested(keys, value))
            duplicates |= {f"{key}.{d}" for d in found}
            delete.add(i)
    result = [a for i, a in enumerate(processed) if i not in delete]
    if duplicates:
        logger.warning("Found duplicate keys %s", ", ".join(duplicates))
    for key, value in dict_args.items():
        result += [key, json.dumps(value)]
    return result


def rewrite(args: list[str]) -> list[str]:
    """The argv vLLM's argparse parses for ARGS (which start with the subcommand)."""
    if args and args[0] == "serve":
        args = _move_model_option(args)
        if (
            len(args) > 1
            and args[1].startswith("-")
            and not any(re.match(r"^--config(=.+|$)", a) for a in args)
            and any(re.match(r"^--served[-_]model[-_]name(=.+|$)", a) for a in args)
        ):
            raise ValueError("vllm serve: the model must come first, before any option")
    if "--config" in args:
        raise ConfigFileUnsupportedError("the lab's stand-in cannot read `--config` YAML files")
    return _dotted(_dashes(args))
