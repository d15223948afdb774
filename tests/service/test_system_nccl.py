"""vllm_tp2_service's check of the node's NCCL (tasks/system_nccl.yml) before it is mounted over
the image's: a path that is no file on the node stops the run with the way to find it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, output_of, run_local_play

TASKS = REPO / "roles/vllm_tp2_service/tasks"


def check(tmp_path: Path, system_nccl: str) -> tuple[int, str]:
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"vllm_tp2_service_system_nccl": system_nccl},
            "tasks": [{"ansible.builtin.include_tasks": str(TASKS / "system_nccl.yml")}],
        }
    ]
    result = run_local_play(tmp_path, play)
    return result.returncode, output_of(result, 60)


def test_a_library_on_the_node_passes(tmp_path: Path) -> None:
    library = tmp_path / "libnccl.so.2"
    library.write_bytes(b"\x7fELF")
    code, output = check(tmp_path, str(library))
    assert code == 0, output


@pytest.mark.parametrize("name", ["missing/libnccl.so.2", "a directory", "relative"])
def test_anything_else_stops_the_run_naming_the_package(tmp_path: Path, name: str) -> None:
    paths = {
        "missing/libnccl.so.2": str(tmp_path / "missing/libnccl.so.2"),
        "a directory": str(tmp_path),
        "relative": "libnccl.so.2",
    }
    code, output = check(tmp_path, paths[name])
    assert code != 0
    assert f"vllm_tp2_service_system_nccl is {paths[name]}, which is not a file" in output, output
    assert "libnccl2" in output
