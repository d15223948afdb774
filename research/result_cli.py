"""The command line the measuring tools share: measure on the GPU into ``--out`` (and ``--png``),
or redraw an earlier result anywhere with ``--replot JSON --png PNG``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


def parser(description: str) -> argparse.ArgumentParser:
    """A parser with the shared options; a tool adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", help="JSON file for the results (runs on the GPU)")
    parser.add_argument("--png", help="plot of the results")
    parser.add_argument("--replot", metavar="JSON", help="plot an earlier run's JSON (no GPU)")
    return parser


def replotted(
    parser: argparse.ArgumentParser, args: argparse.Namespace, plot: Callable[[Any, str], None]
) -> bool:
    """True once ``--replot`` has drawn its plot; otherwise stops unless ``--out`` is given."""
    if args.replot:
        if not args.png:
            parser.error("--replot needs --png")
        plot(json.loads(Path(args.replot).read_text()), args.png)
        return True
    if not args.out:
        parser.error("--out is required (or --replot JSON --png PNG)")
    return False


def save(args: argparse.Namespace, result: dict, plot: Callable[[Any, str], None]) -> None:
    """The result into ``--out``, and its plot into ``--png`` when asked for."""
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if args.png:
        plot(result, args.png)
