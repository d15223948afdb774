"""The rail preflight (roles/rail_network/tasks/preflight.yml) run by Ansible against a made-up
/proc: CmaFree above CmaTotal is the broken CMA state behind ibv_reg_mr ENOMEM and fails; a CMA
of 0 kB, which a healthy Spark booted with kho=off reports, passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import REPO, output_of, run_local_play

LIMITS = (
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max open files            1024                 1048576              files     \n"
    "Max locked memory         {memlock}              {memlock}              bytes     \n"
)
MEMINFO = (
    "MemTotal:       127535000 kB\nMemFree:        88000000 kB\nMemAvailable:   119000000 kB\n"
)


def preflight(
    tmp_path: Path, cma: str, rdma: bool = True, memlock: str = "8388608"
) -> tuple[int, str]:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(MEMINFO + cma, encoding="utf-8")
    (proc / "self/limits").write_text(LIMITS.format(memlock=memlock), encoding="utf-8")
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "rail_network_procfs_root": str(proc),
                "rail_network_rdma": {"rdma_present": rdma},
                "rail_network_memlock_min_kib": 8192,
            },
            "tasks": [
                {
                    "ansible.builtin.include_tasks": str(
                        REPO / "roles/rail_network/tasks/preflight.yml"
                    )
                },
                {"ansible.builtin.debug": {"msg": "PREFLIGHT PASSED"}},
            ],
        }
    ]
    result = run_local_play(tmp_path, play)
    return result.returncode, output_of(result, 200)


@pytest.mark.parametrize(
    "cma",
    [
        "CmaTotal:              0 kB\nCmaFree:               0 kB\n",  # kho=off on a 7.0 kernel
        "CmaTotal:          65536 kB\nCmaFree:           60000 kB\n",  # a reserved CMA area
        "CmaTotal:          65536 kB\nCmaFree:           65536 kB\n",
        "",  # a kernel without CMA
    ],
    ids=["kho-off", "cma-area", "cma-all-free", "no-cma"],
)
def test_a_sane_cma_passes(tmp_path: Path, cma: str) -> None:
    code, output = preflight(tmp_path, cma)
    assert code == 0, output
    assert "PREFLIGHT PASSED" in output, output


@pytest.mark.parametrize(
    ("cma", "total", "free"),
    [
        ("CmaTotal:              0 kB\nCmaFree:          940604 kB\n", 0, 940604),
        ("CmaTotal:          32768 kB\nCmaFree:         9751756 kB\n", 32768, 9751756),
    ],
    ids=["kho-scratch-uncounted", "kho-scratch-beside-a-cma-area"],
)
def test_cma_free_above_total_fails_naming_both_and_the_fix(
    tmp_path: Path, cma: str, total: int, free: int
) -> None:
    code, output = preflight(tmp_path, cma)
    assert code != 0, output
    assert f"reports CmaFree {free} kB above CmaTotal {total} kB" in output, output
    assert "on localhost" in output and "kho=off" in output and "reboot" in output, output
    assert "PREFLIGHT PASSED" not in output


def test_without_rdma_a_broken_cma_is_only_reported(tmp_path: Path) -> None:
    code, output = preflight(
        tmp_path, "CmaTotal:              0 kB\nCmaFree:          940604 kB\n", rdma=False
    )
    assert code == 0, output
    assert "CMA 0 kB (940604 kB free)" in output, output
    assert "are not enforced" in output, output


def test_a_low_locked_memory_limit_fails(tmp_path: Path) -> None:
    code, output = preflight(tmp_path, "CmaTotal: 0 kB\nCmaFree: 0 kB\n", memlock="65536")
    assert code != 0, output
    assert "The locked-memory limit on localhost is 64 KiB" in output, output
    assert "rail_network_memlock_min_kib" in output, output
