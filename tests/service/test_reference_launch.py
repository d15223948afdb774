"""The production units carry the reference deployment's launch, row by row of the role README."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.service.render import ROLE, production_rank

TABLE_HEADING = "The reference deployment, setting by setting"
ABSENT = "—"
FLAG = "(flag)"


def reference_rows() -> list[dict[str, str]]:
    """The rows of the README's reference table, by column name."""
    text = (ROLE / "README.md").read_text(encoding="utf-8")
    section = text.split(f"## {TABLE_HEADING}", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        rows.append(dict(zip(header, cells, strict=True)))
    return rows


def code(cell: str) -> str | None:
    """The text of a cell that is one code span, else None (a description, not a value)."""
    match = re.fullmatch(r"`([^`]*)`", cell)
    return match.group(1) if match else None


CHECKED = [row for row in reference_rows() if code(row["setting"]) and row["here"]]
CHECKED = [row for row in CHECKED if code(row["here"]) is not None or row["here"] in (FLAG, ABSENT)]


def test_the_table_covers_the_reference_launch() -> None:
    settings = {code(row["setting"]) for row in CHECKED}
    # A row lost from the table would silently stop being checked.
    assert len(CHECKED) >= 60, len(CHECKED)
    for must in ("--linear-backend", "--shutdown-timeout", "NCCL_NET", "--speculative-config"):
        assert must in settings


def _docker_and_serve(published: dict[str, Any]) -> tuple[list[str], list[str]]:
    args = published["vllm_tp2_service_run_args"]
    image = args.index("serve") - 2  # ... IMAGE vllm serve ...
    return args[:image], args[image + 1 :]


@pytest.mark.parametrize("row", CHECKED, ids=[code(row["setting"]) or "" for row in CHECKED])
def test_production_rank0_carries_the_row(row: dict[str, str]) -> None:
    published = production_rank(0)
    docker, serve = _docker_and_serve(published)
    env = published["vllm_tp2_service_container_env"]
    setting, here = code(row["setting"]) or "", row["here"]
    if not setting.startswith("--"):
        value = env.get(setting)
        assert value == (None if here == ABSENT else code(here)), f"{setting}={value}"
        return
    # A docker option sits before the image, a vLLM flag after it; the README names which by the
    # flags docker knows.
    args = docker if setting in DOCKER_OPTIONS else serve
    if here == ABSENT:
        assert setting not in args
    elif here == FLAG:
        assert setting in args
    else:
        assert setting in args, f"{setting} missing"
        value = args[args.index(setting) + 1]
        expected = code(here) or ""
        if expected.startswith("{"):
            assert json.loads(value) == json.loads(expected)
        else:
            assert value == expected


DOCKER_OPTIONS = {
    "--gpus",
    "--network",
    "--ipc",
    "--shm-size",
    "--ulimit",
    "--cap-add",
    "--device",
    "--restart",
}


def test_rank1_differs_only_by_rank_headless_and_api() -> None:
    _, rank0 = _docker_and_serve(production_rank(0))
    _, rank1 = _docker_and_serve(production_rank(1))
    assert rank1[rank1.index("--node-rank") + 1] == "1"
    without_api = [a for a in rank0 if a not in ("--host", "0.0.0.0", "--port", "8000")]
    expected = [("1" if i == rank0.index("--node-rank") + 1 else a) for i, a in enumerate(rank0)]
    expected = [a for a in expected if a in without_api or a == "1"]
    assert [a for a in rank1 if a != "--headless"] == expected
    assert "--headless" in rank1
