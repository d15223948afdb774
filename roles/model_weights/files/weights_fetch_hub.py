#!/usr/bin/env python3
"""Download one pinned revision of a hub repository into a directory, with the hub's own client.

huggingface_hub resumes interrupted files itself (its state lives in <dir>/.cache/huggingface)
and draws its progress bars on stderr, which the role sends to a log file next to the directory.
The token, when one is needed, comes from the HF_TOKEN environment variable.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo-id", required=True)
    parser.add_argument("--revision", required=True, help="a commit id, never a branch")
    parser.add_argument("--dir", required=True, help="the revision-named target directory")
    parser.add_argument("--max-workers", type=int, default=8)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Installed only in the hub venv on the source node.
    from huggingface_hub import snapshot_download  # type: ignore[import-not-found]

    path = snapshot_download(
        repo_id=args.repo_id,
        revision=args.revision,
        local_dir=args.dir,
        max_workers=args.max_workers,
    )
    print(f"downloaded {args.repo_id}@{args.revision} into {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
