"""Command line: parse one kind of evidence from a file (or stdin) and print it as JSON.

python -m tools.pair_evidence nccl-log LOG
python -m tools.pair_evidence allreduce OUTPUT
python -m tools.pair_evidence ib-write-bw OUTPUT
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tools.pair_evidence.allreduce import NoAllReduceRowsError, parse_allreduce_output
from tools.pair_evidence.ib_write_bw import NoBandwidthRowError, parse_ib_write_bw
from tools.pair_evidence.nccl_log import parse_nccl_log


def _read_lines(source: str) -> list[str]:
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    return text.splitlines()


def _nccl_log(lines: list[str]) -> dict[str, Any]:
    report = parse_nccl_log(lines)
    return {**asdict(report), "transport": str(report.transport), "uses_rdma": report.uses_rdma}


def _allreduce(lines: list[str]) -> dict[str, Any]:
    result = parse_allreduce_output(lines)
    return {
        **asdict(result),
        "peak_busbw_gbytes": result.peak_busbw_gbytes,
        "largest": asdict(result.largest),
        "wrong_total": result.wrong_total,
    }


def _ib_write_bw(lines: list[str]) -> dict[str, Any]:
    return asdict(parse_ib_write_bw(lines))


PARSERS = {"nccl-log": _nccl_log, "allreduce": _allreduce, "ib-write-bw": _ib_write_bw}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.pair_evidence", description=__doc__)
    parser.add_argument("kind", choices=sorted(PARSERS))
    parser.add_argument("source", help="file to read, or - for stdin")
    args = parser.parse_args(argv)
    try:
        parsed = PARSERS[args.kind](_read_lines(args.source))
    except (NoAllReduceRowsError, NoBandwidthRowError) as error:
        print(json.dumps({"error": str(error)}))
        return 2
    print(json.dumps(parsed, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
