"""`vllm serve`'s command line: stock vLLM's own option table plus the fork's flags.

What the stand-in checks before it starts, in vLLM's order and with vLLM's outcomes:
1. FlexibleArgumentParser's rewriting (flexible.py), then argparse over the real parser's actions
   (serve_cli_spec.json, dumped from the pinned vLLM by lab/vllm_cli_spec.py) and the fork-only
   flags (fork_flags.py): an unknown option exits 2 with argparse's "unrecognized arguments", a
   bad or missing value exits 2, as in vLLM.
2. The quick checks of validate_parsed_serve_args that need no model (validate_serve_args):
   an exception and exit status 1, as in vLLM.
3. What vLLM checks when it builds the engine config: the VLLM_* environment (environ.py), the
   shutdown timeout's lower bound and the executor backend of a multi-node group (exit 1), and
   the stand-in's own check of the pair's topology (check_topology, exit 2).
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from vllm_standin import behaviour, environ, flexible, fork_flags, serve, spec_parser

logger = logging.getLogger("vllm.standin")


@functools.cache
def spec() -> dict[str, Any]:
    return spec_parser.load_spec()


def parser() -> argparse.ArgumentParser:
    """The top-level `vllm` parser with the serve subcommand, as vllm/entrypoints/cli/main.py."""
    table = spec()
    root = argparse.ArgumentParser(prog="vllm", description="vLLM CLI (the lab's stand-in)")
    version = f"{table['vllm_version']} (lab stand-in)"
    root.add_argument("-v", "--version", action="version", version=version)
    commands = root.add_subparsers(required=False, dest="subparser")
    # The spec carries -h/--help itself, among the real actions and in their order.
    serve_cmd = commands.add_parser("serve", usage=table["usage"], add_help=False)
    for action in (*table["actions"], *fork_flags.FORK_ONLY_FLAGS):
        spec_parser.add_action(serve_cmd, action)
    return root


def validate_serve_args(args: argparse.Namespace) -> None:
    """validate_parsed_serve_args (vllm/entrypoints/common/cli_args.py), the model-free checks.

    Left out: the chat template, --grpc-port and --reasoning-effort-map checks, which the units
    never reach.
    """
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise TypeError("Error: --enable-auto-tool-choice requires --tool-call-parser")
    if args.enable_log_outputs and not args.enable_log_requests:
        raise TypeError("Error: --enable-log-outputs requires --enable-log-requests")
    if args.sse_keep_alive_interval < 0:
        raise ValueError(
            "Error: --sse-keep-alive-interval must be a non-negative integer "
            "(0 disables keep-alive comments)."
        )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse `vllm ARGV` as vLLM does; raises where vLLM raises, exits where argparse exits."""
    args = parser().parse_args(flexible.rewrite(list(argv)))
    if args.subparser != "serve":
        return args
    for action in spec()["actions"]:  # Python < 3.13: FlexibleArgumentParser warns itself
        if action["deprecated"] and getattr(args, action["dest"]) != action["default"]:
            logger.warning("argument '%s' is deprecated", action["dest"])
    validate_serve_args(args)
    if args.model_tag is not None:  # ServeSubcommand.cmd: the positional wins over --model
        args.model = args.model_tag
    return args


def check_engine_config(args: argparse.Namespace) -> None:
    """Checks vLLM makes when it builds the engine config (before loading): ValueError."""
    environ.validate_environ(os.environ, spec(), args.fail_on_environ_validation)
    if args.shutdown_timeout < 0:  # vllm/config/vllm.py: Field(default=0, ge=0)
        raise ValueError(f"shutdown_timeout: Input should be >= 0 ({args.shutdown_timeout})")
    backend = args.distributed_executor_backend  # vllm/config/parallel.py, __post_init__
    if args.nnodes > 1 and backend not in (None, "mp", "uni", "external_launcher"):
        raise ValueError(
            "nnodes > 1 can only be set when distributed executor "
            "backend is mp, uni or external_launcher."
        )


def check_topology(args: argparse.Namespace) -> str:
    """The consistency vLLM itself enforces for multi-node TP without Ray; '' when fine."""
    if args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        return f"--node-rank {args.node_rank} is outside 0..{args.nnodes - 1}"
    if args.nnodes > 1 and args.tensor_parallel_size % args.nnodes:
        tp = args.tensor_parallel_size
        return f"--tensor-parallel-size {tp} does not split over {args.nnodes} nodes"
    if args.node_rank > 0 and not args.headless:
        return "nodes other than rank 0 must run --headless"
    if args.node_rank == 0 and args.headless:
        return "rank 0 serves the API and cannot be --headless"
    return ""


def api_keys(args: argparse.Namespace) -> tuple[str, ...]:
    """--api-key (any of several) wins over VLLM_API_KEY (serve/middleware/register.py)."""
    return tuple(key for key in (args.api_key or [os.environ.get("VLLM_API_KEY")]) if key)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except flexible.ConfigFileUnsupportedError as exc:
        print(f"vllm: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, IndexError) as exc:  # vLLM: an uncaught exception, status 1
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if args.subparser != "serve":
        parser().print_help()
        return 0
    problem = check_topology(args)
    if problem:
        print(f"vllm serve: error: {problem}", file=sys.stderr)
        return 2
    try:
        check_engine_config(args)
    except ValueError as exc:
        logger.error("ValueError: %s", exc)
        return 1
    return serve.run(args, behaviour.load(), api_keys(args))
