"""The command line the GPU studies share: measure to a JSON file, or report on one."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A parser with --out/--report (exactly one, checked by ``parse``), --png, --markdown and
    --marlin-lib; the study adds its own options."""
    made = argparse.ArgumentParser(prog=prog, description=(doc or "").split("\n\n")[0])
    made.add_argument("--out", type=Path, help="JSON results file (measures; needs a GPU)")
    made.add_argument("--report", type=Path, help="JSON to report on instead (no GPU)")
    made.add_argument("--png", type=Path, help="plot to write from the results")
    made.add_argument("--markdown", type=Path, help="tables to write from the results")
    made.add_argument("--marlin-lib", help="Marlin library from tools/marlin/build.py")
    return made


def parse(made: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args = made.parse_args(argv)
    if (args.out is None) == (args.report is None):
        made.error("give exactly one of --out (measure) and --report (from a JSON)")
    return args


def result(args: argparse.Namespace, measure: Any) -> dict[str, Any]:
    """What --out measures (``measure(args)``, which writes it) or what --report reads."""
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        return measure(args)
    return json.loads(args.report.read_text(encoding="utf-8"))
