#!/usr/bin/env python3
"""Build the overlay wheel and lay it out as a release the nodes can use without pip.

    overlay_release.py --source files/vllm_dualpath --out .cache/overlay

Writes <out>/<release>.tar holding <release>/site/ (the wheel unpacked: importable package plus
its .dist-info, so vLLM finds the entry point on PYTHONPATH), <release>/SHA256SUMS (every file
under site/) and <release>/RELEASE (JSON). The release name is <version>-<12 hex>, the hex taken
from the wheel's RECORD (content hashes of every file), so rebuilding unchanged sources gives the
same name and byte-identical tar. Prints {"release", "version", "tar", "wheel", "bytes",
"entries"} as JSON: ``bytes`` is what the release's files hold, ``entries`` its files and
directories (the release directory included), from which the nodes reckon the space it takes.
Both files appear whole or not at all (written aside, then renamed), so two runs building the
same sources at once each read a complete tar.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path


def build_wheel(source: Path, out: Path) -> Path:
    """Build from a copy of the sources, so that no build/ or egg-info lands in the repository."""
    with tempfile.TemporaryDirectory(prefix="overlay-build-") as workdir:
        copy = Path(workdir) / "src"
        shutil.copytree(
            source, copy, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", ".*cache*")
        )
        result = subprocess.run(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", workdir, copy],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise SystemExit(
                f"wheel build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        (wheel,) = Path(workdir).glob("*.whl")
        out.mkdir(parents=True, exist_ok=True)
        target = out / wheel.name
        aside = out / f".{wheel.name}.{os.getpid()}"
        shutil.copyfile(wheel, aside)
        aside.replace(target)
        return target


def release_name(wheel: zipfile.ZipFile, version: str) -> str:
    (record,) = [n for n in wheel.namelist() if n.endswith(".dist-info/RECORD")]
    lines = sorted(
        line
        for line in wheel.read(record).decode().splitlines()
        if line and not line.startswith(record + ",")
    )
    return f"{version}-{hashlib.sha256(chr(10).join(lines).encode()).hexdigest()[:12]}"


def add_file(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    info.uname = info.gname = "root"
    tar.addfile(info, io.BytesIO(data))


def add_dir(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
    info.uname = info.gname = "root"
    tar.addfile(info)


def write_release(wheel_path: Path, out: Path) -> dict[str, str | int]:
    version = wheel_path.name.split("-")[1]
    with zipfile.ZipFile(wheel_path) as wheel:
        release = release_name(wheel, version)
        files = {n: wheel.read(n) for n in sorted(wheel.namelist()) if not n.endswith("/")}
    sums = "".join(
        f"{hashlib.sha256(data).hexdigest()}  site/{name}\n" for name, data in files.items()
    )
    meta = {"release": release, "version": version, "wheel": wheel_path.name}
    tar_path = out / f"{release}.tar"
    aside = out / f".{release}.tar.{os.getpid()}"
    directories = sorted({str(Path(n).parent) for n in files} - {"."})
    with tarfile.open(aside, "w", format=tarfile.GNU_FORMAT) as tar:
        # No entry for <release>/ itself: the node creates it at landing time, which is the
        # age prune.yml sorts releases by.
        add_dir(tar, f"{release}/site")
        for directory in directories:
            parts = Path(directory).parts
            for depth in range(1, len(parts) + 1):
                name = f"{release}/site/{'/'.join(parts[:depth])}"
                if name not in tar.getnames():
                    add_dir(tar, name)
        for name, data in files.items():
            add_file(tar, f"{release}/site/{name}", data)
        release_json = (json.dumps(meta, indent=2) + "\n").encode()
        add_file(tar, f"{release}/RELEASE", release_json)
        add_file(tar, f"{release}/SHA256SUMS", sums.encode())
        entries = len(tar.getnames()) + 1  # the release directory, made on the node
    aside.replace(tar_path)
    size = sum(map(len, files.values())) + len(release_json) + len(sums.encode())
    return {**meta, "tar": str(tar_path), "bytes": size, "entries": entries}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    wheel = build_wheel(args.source.resolve(), args.out.resolve())
    print(json.dumps(write_release(wheel, args.out.resolve())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
