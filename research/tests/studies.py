"""The probes and their committed results, as the research tests reach them: each probe runs from
the repository root as its doc runs it, with the overlay package and its benchmarks on
PYTHONPATH."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

RESEARCH = Path(__file__).resolve().parents[1]
REPO = RESEARCH.parent
RESULTS = RESEARCH / "results"
# What a probe imports besides its neighbours in research/.
OVERLAY = (REPO / "files/vllm_dualpath/src", REPO / "files/vllm_dualpath/benchmarks")


def run(*args: str, timeout: int = 300, **env: str) -> subprocess.CompletedProcess[str]:
    """Run a command from the repository root with research/ and the overlay on PYTHONPATH, plus
    ``env``; never raises on failure."""
    path = os.pathsep.join(str(p) for p in (RESEARCH, *OVERLAY))
    environment = {**os.environ, "PYTHONPATH": path, "NO_COLOR": "1", **env}
    return subprocess.run(
        list(args),
        cwd=REPO,
        env=environment,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )


def output_of(result: subprocess.CompletedProcess[str], lines: int = 200) -> str:
    text = (result.stdout or "") + (result.stderr or "")
    return "\n".join(text.splitlines()[-lines:])


def committed_result(probe: str, gpu: str = "h200") -> Path:
    """The committed result of ``research/<probe>.py`` on ``gpu``."""
    return RESULTS / f"{probe.replace('_', '-')}-{gpu}.json"


def probe_command(result: dict) -> tuple[str, list[str]]:
    """The file name of the probe that made a committed result, and its arguments, from the
    command the result records."""
    python, script, *args = result["command"].split()
    assert python == "python3", result["command"]
    return Path(script).name, args


def assert_doc_has_every_path(result_path: Path, doc: Path | None = None) -> None:
    """The committed result's doc (by default the .md beside it) gives, in its table rows for
    each M, BF16's time and power per pass and every other path's time and energy / BF16 and its
    power."""
    result = json.loads(result_path.read_text())
    lines = (doc or result_path.with_suffix(".md")).read_text().splitlines()
    for row in result["rows"]:
        m, bf16 = row["m"], row["paths"]["bf16"]
        rows = "\n".join(line for line in lines if line.startswith(f"| {m} | "))
        assert f"| {m} | {bf16['us_per_pass']:.0f} us, {bf16['mean_power_w']:.0f} W" in rows, m
        for name, path in row["paths"].items():
            if name == "bf16":
                continue
            time = path["us_per_pass"] / bf16["us_per_pass"]
            energy = path["j_per_pass"] / bf16["j_per_pass"]
            cell = rf"{time:.3f}x( time)?, {energy:.3f}x( energy)?, {path['mean_power_w']:.0f} W"
            assert re.search(cell, rows), (m, name, cell)
