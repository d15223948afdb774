#!/usr/bin/env python3
"""Generate a small checkpoint in the hub's layout, with the hub API's answer for it beside it.

Stand-in for a hub repository where no hub is reachable (the lab, unit tests):

    <out>/files/   config.json, model.safetensors.index.json, model-0000K-of-0000N.safetensors
                   (with --single-file: config.json and model.safetensors, as a DFlash2 drafter
                   repository has them)
    <out>/api.json what `GET /api/models/<repo>/revision/<sha>?blobs=true` returns for it:
                   `sha` (the revision) and `siblings` with sizes, blob ids and LFS sha256s

Deterministic: the same --seed gives the same bytes, hence the same revision id. Stdlib only, so
it runs on a lab host as it is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import struct
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TENSORS_PER_SHARD = 2


def safetensors_bytes(tensors: dict[str, bytes]) -> bytes:
    """A valid safetensors file holding each blob as a flat U8 tensor."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, data in tensors.items():
        end = offset + len(data)
        header[name] = {"dtype": "U8", "shape": [len(data)], "data_offsets": [offset, end]}
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format pads the header to 8 bytes
    return struct.pack("<Q", len(encoded)) + encoded + b"".join(tensors.values())


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def generate(
    out: Path,
    seed: int,
    shards: int,
    shard_bytes: int,
    single_file: bool = False,
    repo_id: str = "stand-in/generated",
) -> dict[str, Any]:
    """Write the repository under out/files and the hub's answer for it to out/api.json. With
    single_file, one model.safetensors of shard_bytes and no index (``shards`` is not used)."""
    rng = random.Random(seed)
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    tensor_bytes = shard_bytes // TENSORS_PER_SHARD
    shard_count = 1 if single_file else shards
    for shard in range(1, shard_count + 1):
        name = f"model-{shard:05d}-of-{shards:05d}.safetensors"
        if single_file:
            name = "model.safetensors"
        tensors = {
            f"model.layers.{shard - 1}.w{t}.weight": rng.randbytes(tensor_bytes)
            for t in range(TENSORS_PER_SHARD)
        }
        weight_map.update(dict.fromkeys(tensors, name))
        files[name] = safetensors_bytes(tensors)
    if not single_file:
        total = sum(len(b) for b in files.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        files["model.safetensors.index.json"] = json.dumps(index, indent=2).encode()
    model_type = "stand-in-drafter" if single_file else "stand-in"
    files["config.json"] = json.dumps({"model_type": model_type, "seed": seed}).encode()

    siblings = []
    for name, data in sorted(files.items()):
        sibling: dict[str, Any] = {"rfilename": name, "size": len(data)}
        sibling["blobId"] = git_blob_id(data)
        if name.endswith(".safetensors"):
            pointer = f"oid sha256:{hashlib.sha256(data).hexdigest()}\nsize {len(data)}\n".encode()
            # The hub's blob id of an LFS file is its pointer's.
            sibling["blobId"] = git_blob_id(pointer)
            sibling["lfs"] = {
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "pointerSize": len(pointer),
            }
        siblings.append(sibling)
    revision = hashlib.sha1(json.dumps(siblings, sort_keys=True).encode()).hexdigest()
    api = {"id": repo_id, "sha": revision, "siblings": siblings}

    (out / "files").mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out / "files" / name).write_bytes(data)
    (out / "api.json").write_text(json.dumps(api, indent=2) + "\n", encoding="utf-8")
    return api


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--shard-mib", type=float, default=8.0)
    parser.add_argument(
        "--single-file",
        action="store_true",
        help="one model.safetensors of --shard-mib and config.json, no index (a drafter)",
    )
    parser.add_argument("--repo-id", default="stand-in/generated", help="the answer's `id`")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    api = generate(
        args.out,
        args.seed,
        args.shards,
        int(args.shard_mib * 1024 * 1024),
        single_file=args.single_file,
        repo_id=args.repo_id,
    )
    print(api["sha"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
