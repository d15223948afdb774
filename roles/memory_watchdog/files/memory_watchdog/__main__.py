"""The command line and the sampling loop: ``python3 -m memory_watchdog [options] -- COMMAND``."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from memory_watchdog import readings
from memory_watchdog.guard import Drain, Guard
from memory_watchdog.report import Writer, state_of

logger = logging.getLogger("memory_watchdog")


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="memory_watchdog", description=__doc__)
    parser.add_argument("--procfs-root", type=Path, default=Path("/proc"))
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS")
    parser.add_argument("--samples", type=int, default=5, help="low samples in a row that drain")
    parser.add_argument("--floor-bytes", type=int, required=True)
    parser.add_argument(
        "--holdoff",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="the least time from a drain to re-arming",
    )
    parser.add_argument("--drain-timeout", type=float, default=210.0, metavar="SECONDS")
    parser.add_argument("--peer-url", default="", help="the peer exporter's /metrics; '' = none")
    parser.add_argument("--peer-timeout", type=float, default=0.5, metavar="SECONDS")
    parser.add_argument("--state-file", type=Path)
    parser.add_argument("--textfile-dir", type=Path, help="node_exporter's textfile directory")
    parser.add_argument("drain", nargs=argparse.REMAINDER, help="-- the drain command ('': none)")
    args = parser.parse_args(argv)
    if args.drain[:1] == ["--"]:
        args.drain = args.drain[1:]
    if args.interval <= 0 or args.samples < 1 or args.floor_bytes < 0:
        parser.error("--interval must be > 0, --samples >= 1 and --floor-bytes >= 0")
    return args


def run(args: argparse.Namespace, stop: list[bool]) -> None:
    guard = Guard(
        args.floor_bytes, args.samples, args.holdoff, Drain(args.drain, args.drain_timeout)
    )
    writer = Writer(args.state_file, args.textfile_dir)
    peer_up: bool | None = None  # unknown until the first poll
    fired: tuple[float | None, float | None] = (None, None)  # (monotonic, Unix time)
    logger.info(
        "watching MemAvailable every %s s against %.2f GiB, %s samples in a row%s; drain: %s",
        args.interval,
        args.floor_bytes / (1 << 30),
        args.samples,
        f", and the peer at {args.peer_url}" if args.peer_url else "",
        " ".join(args.drain) or "none (rank 0 drains the pair)",
    )
    tick = time.monotonic()
    while not stop[0]:
        now = time.monotonic()
        available: dict[str, int | None] = {"self": readings.local_available(args.procfs_root)}
        floors = {"self": args.floor_bytes}
        if args.peer_url:
            seen = readings.peer(args.peer_url, args.peer_timeout)
            if (seen.available is not None) is not peer_up:
                peer_up = seen.available is not None
                if peer_up:
                    logger.info("the peer's exporter answers")
                else:
                    logger.warning("the peer gave no reading: %s", seen.error)
            available["peer"] = seen.available
            floors["peer"] = seen.floor if seen.floor else args.floor_bytes
        guard.step(now, available, floors)
        if guard.drained_at != fired[0]:
            fired = (guard.drained_at, time.time())
        try:
            writer.write(state_of(guard, bool(args.peer_url), bool(peer_up)), fired[1], time.time())
        except OSError as error:
            logger.error("cannot write the state: %s", error)
        tick += args.interval
        delay = tick - time.monotonic()
        if delay < 0:
            tick, delay = time.monotonic(), 0.0
        time.sleep(delay)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="memory-watchdog: %(message)s", stream=sys.stderr
    )
    args = arguments(argv)
    stop = [False]

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run(args, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
