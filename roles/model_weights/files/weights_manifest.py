#!/usr/bin/env python3
"""Check a staged checkpoint directory against the hub's file list for its pinned revision.

The file list is the hub's own answer for the revision (`GET /api/models/<repo>/revision/<sha>
?blobs=true`, the `siblings` array): every file with its size, its git blob id and, for LFS files,
its sha256. A directory is complete when every listed file is there with that size and hash, no
other file is, and every safetensors index names only shards that are there and whole.

    weights_manifest.py check --dir D --file-list F --marker M [--deep] [--require NAME ...]
        read-only: is D verified? Quick: marker matches the file list and every size matches;
        --deep: every hash is computed again. Prints a JSON report.
    weights_manifest.py seal --dir D --file-list F --marker M [--require NAME ...]
        hashes everything; writes the marker only when all is well, removes it otherwise.

--require names a file the consumer cannot do without (a drafter's config.json and
model.safetensors): a revision whose file list lacks it is never complete, hence never verified.

Runs on the node with the stdlib only (python3 >= 3.10).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

CHUNK = 8 * 1024 * 1024
# The hub client keeps its resume state here inside a local_dir download; not part of the repo.
IGNORED_TOP_DIRS = frozenset({".cache"})
INDEX_SUFFIX = ".safetensors.index.json"
MARKER_FORMAT = 1


class FileListError(ValueError):
    """The hub's file list is malformed or names a path outside the checkpoint directory."""


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int
    sha256: str | None  # LFS files: the hub gives the content's sha256
    git_sha1: str | None  # every file: the git blob id (sha1 of "blob <size>\0" + content)


@dataclass
class Report:
    missing: list[str] = field(default_factory=list)
    short: list[str] = field(default_factory=list)  # smaller than listed: a transfer to resume
    wrong: list[str] = field(default_factory=list)  # too big or wrong hash: fetch again
    unexpected: list[str] = field(default_factory=list)
    index_problems: list[str] = field(default_factory=list)
    not_provided: list[str] = field(default_factory=list)  # required, but not in the repository
    marker: str = "absent"  # absent | current | stale
    files: int = 0
    bytes_expected: int = 0
    bytes_present: int = 0
    deep: bool = False

    @property
    def complete(self) -> bool:
        return not (
            self.missing
            or self.short
            or self.wrong
            or self.unexpected
            or self.index_problems
            or self.not_provided
        )

    def as_dict(self, verified: bool) -> dict[str, Any]:
        return {
            "verified": verified,
            "complete": self.complete,
            "deep": self.deep,
            "marker": self.marker,
            "files": self.files,
            "bytes_expected": self.bytes_expected,
            "bytes_present": self.bytes_present,
            "missing": self.missing,
            "short": self.short,
            "wrong": self.wrong,
            "unexpected": self.unexpected,
            "index_problems": self.index_problems,
            "not_provided": self.not_provided,
        }


def safe_relative_path(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise FileListError(f"file name {name!r} is not a non-empty string")
    pure = PurePosixPath(name)
    if pure.is_absolute() or ".." in pure.parts or str(pure) != name:
        raise FileListError(f"file name {name!r} is not a plain relative path")
    if pure.parts[0] in IGNORED_TOP_DIRS:
        raise FileListError(f"file name {name!r} is inside a directory reserved for the client")
    return name


def parse_sibling(entry: object) -> RepoFile:
    """One entry of the hub's `siblings` array (with `blobs=true`)."""
    if not isinstance(entry, dict):
        raise FileListError(f"sibling {entry!r} is not an object")
    path = safe_relative_path(entry.get("rfilename"))
    lfs = entry.get("lfs") or {}
    size = lfs.get("size", entry.get("size")) if isinstance(lfs, dict) else None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise FileListError(f"{path}: size {size!r} is not a byte count")
    sha256 = lfs.get("sha256") if isinstance(lfs, dict) else None
    git_sha1 = entry.get("blobId")
    if sha256 is not None and not is_hex(sha256, 64):
        raise FileListError(f"{path}: sha256 {sha256!r} is not 64 hex digits")
    if git_sha1 is not None and not is_hex(git_sha1, 40):
        raise FileListError(f"{path}: blobId {git_sha1!r} is not 40 hex digits")
    if sha256 is None and (git_sha1 is None or lfs):
        raise FileListError(f"{path}: the file list gives no content hash for it")
    return RepoFile(path=path, size=size, sha256=sha256, git_sha1=None if lfs else git_sha1)


def is_hex(value: object, length: int) -> bool:
    return (
        isinstance(value, str)
        and len(value) == length
        and all(c in "0123456789abcdef" for c in value)
    )


def load_file_list(document: object) -> list[RepoFile]:
    if not isinstance(document, dict) or not isinstance(document.get("siblings"), list):
        raise FileListError("the file list has no 'siblings' array")
    files = [parse_sibling(entry) for entry in document["siblings"]]
    if not files:
        raise FileListError("the file list is empty")
    names = [f.path for f in files]
    if len(set(names)) != len(names):
        raise FileListError("the file list names a file twice")
    return sorted(files, key=lambda f: f.path)


def file_list_digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def hash_file(path: Path, with_git_header: bool, size: int) -> str:
    digest = hashlib.sha1() if with_git_header else hashlib.sha256()
    if with_git_header:
        digest.update(f"blob {size}\0".encode())
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def content_matches(path: Path, expected: RepoFile) -> bool:
    if expected.sha256 is not None:
        return hash_file(path, with_git_header=False, size=expected.size) == expected.sha256
    return hash_file(path, with_git_header=True, size=expected.size) == expected.git_sha1


def files_on_disk(root: Path) -> set[str]:
    found: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        relative_dir = Path(dirpath).relative_to(root)
        if relative_dir == Path():
            dirnames[:] = [d for d in dirnames if d not in IGNORED_TOP_DIRS]
        for name in filenames:
            found.add((relative_dir / name).as_posix())
    return found


def safetensors_problem(path: Path, size: int) -> str | None:
    """A shard is whole when its header parses and its last tensor ends at the end of the file."""
    try:
        with path.open("rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            if header_len > size - 8:
                return "header length runs past the end of the file"
            header = json.loads(handle.read(header_len))
    except (OSError, struct.error, ValueError) as exc:
        return f"unreadable header ({exc})"
    if not isinstance(header, dict):
        return "header is not an object"
    ends = [
        t["data_offsets"][1]
        for name, t in header.items()
        if name != "__metadata__" and isinstance(t, dict) and "data_offsets" in t
    ]
    if 8 + header_len + max(ends, default=0) != size:
        return "tensor data does not end at the end of the file"
    return None


def index_problems(root: Path, files: Sequence[RepoFile]) -> list[str]:
    listed = {f.path for f in files}
    problems: list[str] = []
    for index in (f for f in files if f.path.endswith(INDEX_SUFFIX)):
        try:
            weight_map = json.loads((root / index.path).read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{index.path}: no readable weight_map ({exc})")
            continue
        if not isinstance(weight_map, dict) or not weight_map:
            problems.append(f"{index.path}: weight_map is empty")
            continue
        base = PurePosixPath(index.path).parent
        for shard in sorted(set(map(str, weight_map.values()))):
            if (base / shard).as_posix() not in listed:
                problems.append(f"{index.path}: shard {shard} is not in the repository")
    return problems


def not_provided(files: Sequence[RepoFile], required: Sequence[str]) -> list[str]:
    """The required files that the revision does not have at all."""
    listed = {f.path for f in files}
    return sorted({safe_relative_path(name) for name in required} - listed)


def inspect(
    root: Path, files: Sequence[RepoFile], deep: bool, required: Sequence[str] = ()
) -> Report:
    report = Report(deep=deep, files=len(files), bytes_expected=sum(f.size for f in files))
    report.not_provided = not_provided(files, required)
    present = files_on_disk(root) if root.is_dir() else set()
    listed = {f.path for f in files}
    report.unexpected = sorted(present - listed)
    for expected in files:
        path = root / expected.path
        if expected.path not in present:
            report.missing.append(expected.path)
            continue
        size = path.stat().st_size
        report.bytes_present += min(size, expected.size)
        if size < expected.size:
            report.short.append(expected.path)
        elif size > expected.size or (deep and not content_matches(path, expected)):
            report.wrong.append(expected.path)
        elif deep and expected.path.endswith(".safetensors"):
            problem = safetensors_problem(path, size)
            if problem:
                report.index_problems.append(f"{expected.path}: {problem}")
    if deep and not (report.missing or report.short or report.wrong):
        report.index_problems.extend(index_problems(root, files))
    return report


def marker_state(marker: Path, digest: str) -> str:
    try:
        recorded = json.loads(marker.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "absent"
    except (OSError, ValueError):
        return "stale"
    current = isinstance(recorded, dict) and recorded.get("file_list_sha256") == digest
    return "current" if current else "stale"


def marker_document(files: Sequence[RepoFile], digest: str) -> dict[str, Any]:
    return {
        "format": MARKER_FORMAT,
        "file_list_sha256": digest,
        "files": len(files),
        "bytes": sum(f.size for f in files),
    }


def write_atomically(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile(
        "w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8"
    ) as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    Path(handle.name).chmod(0o644)
    Path(handle.name).replace(path)


def check(
    root: Path, file_list: Path, marker: Path, deep: bool, required: Sequence[str] = ()
) -> dict[str, Any]:
    try:
        raw = file_list.read_bytes()
    except FileNotFoundError:
        return {"verified": False, "complete": False, "marker": "absent", "reason": "no file list"}
    files = load_file_list(json.loads(raw))
    report = inspect(root, files, deep, required)
    report.marker = marker_state(marker, file_list_digest(raw))
    result = report.as_dict(verified=report.marker == "current" and report.complete)
    result["reason"] = reason(report)
    return result


def seal(root: Path, file_list: Path, marker: Path, required: Sequence[str] = ()) -> dict[str, Any]:
    raw = file_list.read_bytes()
    files = load_file_list(json.loads(raw))
    digest = file_list_digest(raw)
    report = inspect(root, files, deep=True, required=required)
    before = marker_state(marker, digest)
    changed = False
    if report.complete:
        document = marker_document(files, digest)
        if before != "current" or json.loads(marker.read_text(encoding="utf-8")) != document:
            write_atomically(marker, json.dumps(document, indent=2, sort_keys=True) + "\n")
            changed = True
        report.marker = "current"
    elif before != "absent":
        marker.unlink()
        changed = True
    result = report.as_dict(verified=report.complete)
    result["changed"] = changed
    result["reason"] = reason(report)
    return result


def reason(report: Report) -> str:
    parts: Iterable[tuple[str, list[str]]] = (
        ("missing", report.missing),
        ("partly transferred", report.short),
        ("wrong size or hash", report.wrong),
        ("not in the repository", report.unexpected),
        ("index or shard incomplete", report.index_problems),
        ("required but not in the repository", report.not_provided),
    )
    found = [f"{label}: {', '.join(names[:5])}" for label, names in parts if names]
    if found:
        return "; ".join(found)
    return "verified" if report.marker == "current" else f"complete, marker {report.marker}"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("check", "seal"))
    parser.add_argument("--dir", type=Path, required=True, help="the checkpoint directory")
    parser.add_argument("--file-list", type=Path, required=True, help="the hub's file list")
    parser.add_argument("--marker", type=Path, required=True, help="written after verification")
    parser.add_argument("--deep", action="store_true", help="check: hash every file again")
    parser.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="NAME",
        help="a file the revision must have (repeat for more)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if args.action == "check":
            result = check(args.dir, args.file_list, args.marker, args.deep, args.require)
        else:
            result = seal(args.dir, args.file_list, args.marker, args.require)
    except (FileListError, ValueError, OSError) as exc:
        print(json.dumps({"verified": False, "error": str(exc)}))
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
