"""The command line: ``python3 -m spark_exporter [options]``; serves until stopped."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from spark_exporter.server import Server
from spark_exporter.source import Settings


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="spark_exporter", description=__doc__)
    parser.add_argument("--listen-address", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=9835, help="0 picks a free port")
    parser.add_argument("--sysfs-root", type=Path, default=Path("/sys"))
    parser.add_argument("--procfs-root", type=Path, default=Path("/proc"))
    parser.add_argument("--nvidia-smi", default="/usr/bin/nvidia-smi")
    parser.add_argument("--nvidia-smi-timeout", type=float, default=5.0, metavar="SECONDS")
    parser.add_argument("--twin", action="append", default=[], help="a rail interface; repeat")
    parser.add_argument("--expected-mtu", type=int, default=0, help="0: not exported")
    parser.add_argument("--nccl-log", type=Path, help="NCCL's INFO log: a file or a directory")
    parser.add_argument("--overlay-stats-dir", type=Path)
    parser.add_argument("--overlay-dir", type=Path, help="holds the overlay's `current` link")
    parser.add_argument("--tls-certificate", type=Path)
    parser.add_argument("--memory-floor-bytes", type=int, default=0, help="0: not exported")
    return parser.parse_args(argv)


def settings_of(args: argparse.Namespace) -> Settings:
    return Settings(
        sysfs_root=args.sysfs_root,
        procfs_root=args.procfs_root,
        nvidia_smi=args.nvidia_smi,
        nvidia_smi_timeout_s=args.nvidia_smi_timeout,
        twins=tuple(args.twin),
        expected_mtu=args.expected_mtu,
        nccl_log=args.nccl_log,
        overlay_stats_dir=args.overlay_stats_dir,
        overlay_dir=args.overlay_dir,
        tls_certificate=args.tls_certificate,
        memory_floor_bytes=args.memory_floor_bytes,
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="spark-exporter: %(message)s", stream=sys.stderr)
    args = arguments(argv)
    server = Server((args.listen_address, args.port), settings_of(args))

    def stop(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    host, port = server.server_address[:2]
    logging.getLogger("spark_exporter").info("listening on %s:%s", host, port)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
