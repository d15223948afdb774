"""Command line: render the report from a directory of `vllm bench serve` result files.

python -m tools.bench_report RESULTS_DIR --out REPORT_DIR [--title T] [--context KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tools.bench_report.report import NoResultsError, ResultFileError, load_results, write_report


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench_report", description=__doc__)
    parser.add_argument("results_dir", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default="dualspark benchmark")
    parser.add_argument("--context", type=_pair, action="append", default=[])
    args = parser.parse_args(argv)
    try:
        report = write_report(
            load_results(args.results_dir), args.out, args.title, dict(args.context)
        )
    except (NoResultsError, ResultFileError) as error:
        print(f"bench_report: {error}", file=sys.stderr)
        return 2
    print(report.markdown)
    print(report.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
