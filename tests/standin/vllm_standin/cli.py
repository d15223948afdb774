"""`vllm serve` command line, limited to the options the dualspark units pass.

Unknown options are rejected, as vLLM rejects them, so a misspelt flag in a unit template fails
in the lab rather than on a Spark.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from vllm_standin import behaviour, serve


def positive_fraction(raw: str) -> float:
    value = float(raw)
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{raw} is not in (0, 1]")
    return value


def json_object(raw: str) -> dict[str, object]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{raw} is not a JSON object")
    return value


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="vllm", description="vLLM stand-in for the lab")
    commands = root.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve")
    serve_cmd.add_argument("model")
    serve_cmd.add_argument("--host", default="0.0.0.0")
    serve_cmd.add_argument("--port", type=int, default=8000)
    serve_cmd.add_argument("--api-key", default=None)
    serve_cmd.add_argument("--served-model-name", default=None)
    serve_cmd.add_argument("--tensor-parallel-size", type=int, default=1)
    serve_cmd.add_argument("--nnodes", type=int, default=1)
    serve_cmd.add_argument("--node-rank", type=int, default=0)
    serve_cmd.add_argument("--master-addr", default="127.0.0.1")
    serve_cmd.add_argument("--master-port", type=int, default=29501)
    serve_cmd.add_argument("--headless", action="store_true")
    serve_cmd.add_argument("--max-model-len", type=int)
    serve_cmd.add_argument("--kv-cache-dtype", choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"))
    serve_cmd.add_argument("--kv-cache-memory-bytes", type=int)
    serve_cmd.add_argument("--gpu-memory-utilization", type=positive_fraction)
    serve_cmd.add_argument("--max-num-batched-tokens", type=int)
    serve_cmd.add_argument("--max-num-seqs", type=int)
    serve_cmd.add_argument("--speculative-config", type=json_object)
    serve_cmd.add_argument("--trust-remote-code", action="store_true")
    serve_cmd.add_argument("--skip-mm-profiling", action="store_true")
    serve_cmd.add_argument("--enable-prefix-caching", action="store_true")
    serve_cmd.add_argument("--dtype", default="auto")
    serve_cmd.add_argument("--quantization", default=None)
    serve_cmd.add_argument("--load-format", default="auto")
    serve_cmd.add_argument("--distributed-executor-backend", default=None)
    return root


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


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO,
        format="%(levelname)s %(asctime)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )
    args = parser().parse_args(argv)
    problem = check_topology(args)
    if problem:
        print(f"vllm serve: error: {problem}", file=sys.stderr)
        return 2
    api_key = args.api_key or os.environ.get("VLLM_API_KEY") or None
    return serve.run(args, behaviour.load(), api_key)
