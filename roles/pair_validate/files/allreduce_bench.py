#!/usr/bin/env python3
"""All-reduce across the pair with torch.distributed, for runtime images without nccl-tests.

Run once per node inside the runtime image (same arguments but --rank):

    python3 allreduce_bench.py --rank R --master-addr <rank 0 rail IP> --master-port P

On CUDA it uses NCCL (run with NCCL_DEBUG=INFO to record NET/IB or NET/Socket); without CUDA it
uses gloo, which is only good for proving the script itself. Each size prints one line
`ALLREDUCE_RESULT {json}` with nccl-tests' figures: time, algbw and busbw = algbw * 2(n-1)/n in
GB/s, and the number of wrong elements (every rank contributes rank+1, so the sum is known).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

TAG = "ALLREDUCE_RESULT "
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--master-addr", required=True)
    parser.add_argument("--master-port", type=int, default=29600)
    parser.add_argument("--sizes-mib", type=float, nargs="+", default=[8, 64, 512])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--timeout-s", type=int, default=300)
    return parser.parse_args(argv)


def measure(
    size_bytes: int, dtype: torch.dtype, device: torch.device, args: argparse.Namespace
) -> dict[str, float | int]:
    count = max(1, size_bytes // torch.tensor([], dtype=dtype).element_size())
    data = torch.empty(count, dtype=dtype, device=device)
    for _ in range(args.warmup):
        data.fill_(args.rank + 1)
        dist.all_reduce(data)
    synchronize(device)
    elapsed = 0.0
    for _ in range(args.iters):
        data.fill_(args.rank + 1)
        synchronize(device)
        start = time.perf_counter()
        dist.all_reduce(data)
        synchronize(device)
        elapsed += time.perf_counter() - start
    expected = args.world_size * (args.world_size + 1) / 2
    wrong = int((data != expected).sum().item())
    seconds = elapsed / args.iters
    real_bytes = count * data.element_size()
    algbw = real_bytes / seconds / 1e9
    busbw = algbw * 2 * (args.world_size - 1) / args.world_size
    return {
        "size_bytes": real_bytes,
        "time_us": round(seconds * 1e6, 1),
        "algbw_gbytes": round(algbw, 3),
        "busbw_gbytes": round(busbw, 3),
        "wrong": wrong,
    }


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=f"tcp://{args.master_addr}:{args.master_port}",
        rank=args.rank,
        world_size=args.world_size,
        timeout=timedelta(seconds=args.timeout_s),
    )
    try:
        if args.rank == 0:
            print(
                f"allreduce_bench: world_size {args.world_size} backend {backend} "
                f"device {device} dtype {args.dtype}",
                flush=True,
            )
        for size_mib in args.sizes_mib:
            result = measure(int(size_mib * 1024 * 1024), DTYPES[args.dtype], device, args)
            if args.rank == 0:
                print(TAG + json.dumps(result), flush=True)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
