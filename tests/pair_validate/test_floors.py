"""pair_validate's judges (tasks/ib_write_bw_judge.yml, tasks/allreduce_judge.yml) at the role's
default floors, run by Ansible on made-up figures: both twins' ib_write_bw and their sum, and the
all-reduce's bus bandwidth as pair_evidence reads it from the run's output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pair_evidence.readings import READINGS

from tests.helpers import REPO, output_of, run_local_play

ROLE = REPO / "roles/pair_validate"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text(encoding="utf-8"))
SAMPLES = REPO / "tests/pair_evidence/samples"
TWINS = (("enp1s0f1np1", "rocep1s0f1"), ("enP2p1s0f1np1", "roceP2p1s0f1"))


def judge(tmp_path: Path, tasks: str, variables: dict[str, Any]) -> tuple[int, str]:
    result = "pair_validate_" + tasks.removesuffix("_judge.yml") + "_result"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"spark_pair_name": "pair1", "spark_pair_peer": "spark-b", **variables},
            "tasks": [
                {"ansible.builtin.include_tasks": str(ROLE / "tasks" / tasks)},
                {"ansible.builtin.debug": {"msg": "JUDGED PASS"}},
                {"ansible.builtin.debug": {"msg": "RESULT {{ " + result + " }}"}},
            ],
        }
    ]
    result = run_local_play(tmp_path, play)
    return result.returncode, output_of(result, 300)


def bandwidth(tmp_path: Path, *gbps: float | None, error: str = "") -> tuple[int, str]:
    figures = [
        {"interface": interface, "device": device, "gbps": value, "error": error}
        for (interface, device), value in zip(TWINS, gbps, strict=True)
    ]
    return judge(
        tmp_path,
        "ib_write_bw_judge.yml",
        {
            "pair_validate_ib_write_bw_figures": figures,
            "pair_validate_ib_write_bw_min_gbps": DEFAULTS["pair_validate_ib_write_bw_min_gbps"],
        },
    )


def test_nvidias_two_spark_figures_pass_and_are_reported_with_their_sum(tmp_path):
    code, output = bandwidth(tmp_path, 92.57, 97.28)
    assert code == 0, output
    assert (
        "enp1s0f1np1 (rocep1s0f1) 92.57 Gb/s + enP2p1s0f1np1 (roceP2p1s0f1) 97.28 Gb/s"
        " = 189.85 Gb/s, both twins at once (floor 85 Gb/s per twin)"
    ) in output, output
    assert "JUDGED PASS" in output


@pytest.mark.parametrize(("slow", "passes"), [(85.0, True), (84.9, False), (12.74, False)])
def test_each_twin_is_held_to_the_floor(tmp_path, slow, passes):
    code, output = bandwidth(tmp_path, 92.57, slow)
    assert (code == 0) is passes, output
    if not passes:
        assert (
            f"ib_write_bw over enP2p1s0f1np1 (roceP2p1s0f1) from localhost to spark-b: {slow} Gb/s,"
            " below pair_validate_ib_write_bw_min_gbps (85 Gb/s)"
        ) in output, output
        assert f"= {round(92.57 + slow, 2)} Gb/s" in output, output
        assert "A healthy twin carries about 92-97 Gb/s with the other busy" in output, output
        assert "JUDGED PASS" not in output


def test_a_twin_without_a_result_fails_with_the_clients_words(tmp_path):
    code, output = bandwidth(
        tmp_path, 92.57, None, error="ib_write_bw printed no result row Couldn't connect"
    )
    assert code != 0, output
    assert "enP2p1s0f1np1 (roceP2p1s0f1) no result" in output, output
    assert "no result (ib_write_bw printed no result row Couldn't connect)" in output, output


def parsed(busbw: float, wrong: int = 0, log: str = "nccl_info_ib_sample.log") -> dict[str, Any]:
    """The two readings of a run, as pair_evidence gives them to the role."""
    size = 512 * 1048576
    row = {
        "size_bytes": size,
        "time_us": size / busbw / 1e3,
        "algbw_gbytes": busbw,
        "busbw_gbytes": busbw,
        "wrong": wrong,
    }
    output = [f"ALLREDUCE_RESULT {json.dumps(row)}"]
    nccl = (SAMPLES / log).read_text(encoding="utf-8").splitlines()
    return {
        "pair_validate_allreduce_figures": READINGS["allreduce"](output),
        "pair_validate_allreduce_transport": READINGS["nccl_log"](nccl),
    }


def allreduce(tmp_path: Path, readings: dict[str, Any], rdma: bool = True) -> tuple[int, str]:
    floors = {
        key: DEFAULTS[key]
        for key in (
            "pair_validate_allreduce_min_busbw_gbytes",
            "pair_validate_allreduce_warn_busbw_gbytes",
        )
    }
    return judge(
        tmp_path, "allreduce_judge.yml", {**readings, **floors, "pair_probe_rdma_present": rdma}
    )


def test_an_allreduce_as_nvidia_expects_passes_quietly(tmp_path):
    code, output = allreduce(tmp_path, parsed(23.1))
    assert code == 0, output
    assert (
        "bus bandwidth 23.1 GB/s at 512 MiB (torch.distributed all_reduce), NCCL over NET/IB"
        " via rocep1s0f1,roceP2p1s0f1 (floor 18 GB/s)"
    ) in output, output
    assert "WARNING" not in output


@pytest.mark.parametrize("busbw", [18.9, 21.0])
def test_the_users_figures_pass_with_a_warning(tmp_path, busbw):
    code, output = allreduce(tmp_path, parsed(busbw))
    assert code == 0, output
    assert "WARNING: all-reduce bus bandwidth" in output, output
    assert "below pair_validate_allreduce_warn_busbw_gbytes (21.875 GB/s" in output, output
    assert "below the 21.875 GB/s NVIDIA expects" in output, output


@pytest.mark.parametrize("busbw", [17.9, 11.9])
def test_below_the_floor_fails_pointing_at_the_hcas(tmp_path, busbw):
    """11.9 GB/s is about all one twin carries: the floor tells a pair on one twin apart."""
    code, output = allreduce(tmp_path, parsed(busbw))
    assert code != 0, output
    assert (
        f"all-reduce on pair pair1 (localhost): bus bandwidth {busbw} GB/s at 536870912 bytes,"
        " below pair_validate_allreduce_min_busbw_gbytes (18 GB/s)"
    ) in output, output
    assert "NCCL_IB_HCA names both twins' RDMA devices" in output, output
    assert "WARNING" not in output  # the failure says it all


def test_wrong_elements_fail(tmp_path):
    code, output = allreduce(tmp_path, parsed(23.1, wrong=3))
    assert code != 0, output
    assert "3 wrong elements" in output, output


@pytest.mark.parametrize(("rdma", "passes"), [(True, False), (False, True)])
def test_a_socket_fallback_fails_only_where_there_is_rdma(tmp_path, rdma, passes):
    readings = parsed(23.1, log="nccl_info_socket_fallback_sample.log")
    code, output = allreduce(tmp_path, readings, rdma=rdma)
    assert (code == 0) is passes, output
    if not passes:
        assert "NCCL transport Socket" in output and "fell back to TCP" in output, output
