"""vllm_tp2_service's memory preflight (tasks/memory.yml) against a made-up /proc/meminfo: vLLM
refuses to start below gpu_memory_utilization x total, and the page-cache loader needs swap."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import REPO, output_of, run_local_play

GIB_KIB = 1024 * 1024
TASKS = REPO / "roles/vllm_tp2_service/tasks"


def meminfo(path: Path, *, total_gib: float, available_gib: float, swap_gib: float) -> None:
    lines = {
        "MemTotal": total_gib,
        "MemFree": available_gib / 2,
        "MemAvailable": available_gib,
        "SwapTotal": swap_gib,
        "CmaTotal": 0,
    }
    path.write_text(
        "".join(f"{key}:{int(gib * GIB_KIB):>16} kB\n" for key, gib in lines.items()),
        encoding="utf-8",
    )


def preflight(tmp_path: Path, load_format: str = "instanttensor") -> tuple[int, str]:
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "vllm_tp2_service_memory_preflight": True,
                "vllm_tp2_service_meminfo_path": str(tmp_path / "meminfo"),
                "vllm_tp2_service_drop_caches": False,
                "vllm_tp2_service_gpu_memory_utilization": 0.85,
                "vllm_tp2_service_memory_wait_s": 0,
                "vllm_tp2_service_min_swap_gib": 32,
                "vllm_tp2_service_load_format": load_format,
            },
            "tasks": [{"ansible.builtin.include_tasks": str(TASKS / "memory.yml")}],
        }
    ]
    result = run_local_play(tmp_path, play)
    return result.returncode, output_of(result, 60)


def test_a_box_with_room_for_the_launch_passes(tmp_path: Path) -> None:
    meminfo(tmp_path / "meminfo", total_gib=119.7, available_gib=110.0, swap_gib=16)
    code, output = preflight(tmp_path)
    assert code == 0, output


def test_too_little_free_memory_fails_with_the_numbers(tmp_path: Path) -> None:
    meminfo(tmp_path / "meminfo", total_gib=119.7, available_gib=95.0, swap_gib=32)
    code, output = preflight(tmp_path)
    assert code != 0
    assert "95.0 GiB available of 119.7 GiB" in output, output
    assert "vllm_tp2_service_gpu_memory_utilization" in output and "101.7 GiB" in output


def test_the_page_cache_loader_needs_swap(tmp_path: Path) -> None:
    meminfo(tmp_path / "meminfo", total_gib=119.7, available_gib=110.0, swap_gib=16)
    code, output = preflight(tmp_path, load_format="auto")
    assert code != 0
    assert "16.0 GiB of swap" in output and "needs 32 GiB" in output, output


def test_enough_swap_for_the_page_cache_loader_passes(tmp_path: Path) -> None:
    meminfo(tmp_path / "meminfo", total_gib=119.7, available_gib=110.0, swap_gib=32)
    code, output = preflight(tmp_path, load_format="auto")
    assert code == 0, output
