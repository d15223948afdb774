"""Each doctor check on a healthy sample pair, and on that pair broken the way the check is for."""

from __future__ import annotations

from typing import Any

import pytest
from pair_doctor import checks
from pair_doctor.checks import CHECKS, Expectations, diagnose
from pair_doctor.findings import Finding, Severity
from pair_evidence.readings import nccl_log_reading

from tests.pair_doctor.healthy_pair import healthy_pair, lab_pair, running_pair

EXPECT = Expectations()


def severities(findings: list[Finding]) -> set[Severity]:
    return {finding.severity for finding in findings}


def only_problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity in (Severity.ERROR, Severity.WARNING)]


def test_healthy_pair_has_no_problem_and_every_check_speaks() -> None:
    findings = diagnose(healthy_pair(), EXPECT)
    assert only_problems(findings) == []
    assert {finding.check for finding in findings} == set(CHECKS)


def test_gid_drift_is_an_error_with_the_new_index() -> None:
    pair = healthy_pair()
    for port in pair["spark-02"]["rdma"]["devices"]["rocep1s0f1"]["ports"].values():
        for gid in port["gids"]:
            gid["index"] += 2  # the table reshuffled: the rail's RoCE v2 GID moved from 3 to 5
    found = only_problems(checks.gid_index_drift(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-02", Severity.ERROR)]
    assert "'rocep1s0f1': 5" in found[0].summary
    assert "playbooks/service.yml" in found[0].fix


def test_gid_unpinned_is_fine() -> None:
    pair = healthy_pair()
    pair["spark-01"]["service_env"]["/etc/dualspark/vllm.env"].pop("NCCL_IB_GID_INDEX")
    assert only_problems(checks.gid_index_drift(pair, EXPECT)) == []


def test_gid_pinned_without_rail_gid_is_an_error() -> None:
    pair = healthy_pair()
    pair["spark-01"]["interfaces"]["enp1s0f1np1"]["ipv4"] = []
    pair["spark-01"]["interfaces"]["enP2p1s0f1np1"]["ipv4"] = []
    found = only_problems(checks.gid_index_drift(pair, EXPECT))
    assert [f.severity for f in found] == [Severity.ERROR]
    assert "no RoCE v2 GID" in found[0].summary


def move_rail_gid(node: dict[str, Any], device: str, index: int) -> None:
    """The GID table rebuilt: the rail address's RoCE v2 GID now sits at `index`."""
    for port in node["rdma"]["devices"][device]["ports"].values():
        for gid in port["gids"]:
            if gid["type"] == "RoCE v2" and gid["gid"].startswith("0000:"):
                gid["index"] = index


def test_running_pair_on_its_start_time_index_is_fine() -> None:
    found = checks.gid_index_drift(running_pair(), EXPECT)
    assert severities(found) == {Severity.OK}
    assert "written to /run/dualspark/vllm-tp2-rank1.rail.env at its start" in found[1].summary


def test_gid_moved_after_the_start_is_an_error_naming_the_runtime_file() -> None:
    pair = running_pair()
    for device in ("rocep1s0f1", "roceP2p1s0f1"):
        move_rail_gid(pair["spark-02"], device, 4)  # the reference's peer power cycle: 3 -> 4
    found = only_problems(checks.gid_index_drift(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-02", Severity.ERROR)]
    assert "uses NCCL_IB_GID_INDEX=3 (written to /run/dualspark/vllm-tp2-rank1.rail.env" in (
        found[0].summary
    )
    assert "'rocep1s0f1': 4, 'roceP2p1s0f1': 4" in found[0].summary
    assert "restart the pair in order" in found[0].fix


def test_the_runtime_file_overrides_a_stale_static_pin() -> None:
    pair = running_pair("4")
    for node in pair.values():
        for device in ("rocep1s0f1", "roceP2p1s0f1"):
            move_rail_gid(node, device, 4)
    pair["spark-01"]["service_env"]["/etc/dualspark/vllm.env"]["NCCL_IB_GID_INDEX"] = "3"
    found = checks.gid_index_drift(pair, EXPECT)
    assert only_problems(found) == []
    assert "NCCL_IB_GID_INDEX=4 (written to /run/dualspark/vllm-tp2-rank0.rail.env" in (
        found[0].summary
    )


def test_a_runtime_file_without_an_index_falls_back_to_the_static_pin() -> None:
    pair = running_pair()
    pair["spark-01"]["service_runtime_env"]["/run/dualspark/vllm-tp2-rank0.rail.env"] = {}
    pair["spark-01"]["service_env"]["/etc/dualspark/vllm.env"]["NCCL_IB_GID_INDEX"] = "5"
    found = only_problems(checks.gid_index_drift(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-01", Severity.ERROR)]
    assert "NCCL_IB_GID_INDEX=5 (pinned in /etc/dualspark/vllm.env)" in found[0].summary
    assert "playbooks/service.yml" in found[0].fix


def test_a_runtime_file_leaving_the_index_to_nccl_is_fine() -> None:
    pair = running_pair()
    pair["spark-02"]["service_runtime_env"]["/run/dualspark/vllm-tp2-rank1.rail.env"] = {}
    found = checks.gid_index_drift(pair, EXPECT)
    assert only_problems(found) == []
    assert found[1].summary.startswith("the service leaves the GID index to NCCL")


def test_a_stopped_service_rediscovers_at_its_next_start() -> None:
    pair = running_pair()
    for unit in pair["spark-02"]["units"].values():
        unit["active"] = False
    move_rail_gid(pair["spark-02"], "rocep1s0f1", 4)  # stale runtime file: harmless when stopped
    found = checks.gid_index_drift(pair, EXPECT)
    assert only_problems(found) == []
    assert "its next start writes NCCL_IB_GID_INDEX to /run/dualspark/vllm-tp2-rank1.rail.env" in (
        found[1].summary
    )


def test_a_stopped_service_whose_next_start_would_fail_is_an_error() -> None:
    pair = running_pair()
    for unit in pair["spark-02"]["units"].values():
        unit["active"] = False
    for interface in pair["spark-02"]["interfaces"].values():
        interface["ipv4"] = []
    found = only_problems(checks.gid_index_drift(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-02", Severity.ERROR)]
    assert "next start will fail" in found[0].summary
    assert "playbooks/network.yml" in found[0].fix


def test_a_runtime_file_gone_under_a_running_service_is_a_warning() -> None:
    pair = running_pair()
    pair["spark-01"]["service_runtime_env"]["/run/dualspark/vllm-tp2-rank0.rail.env"] = None
    found = only_problems(checks.gid_index_drift(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-01", Severity.WARNING)]
    assert "/run/dualspark/vllm-tp2-rank0.rail.env" in found[0].summary


def test_gid_drift_is_skipped_without_rdma_also_with_a_runtime_file() -> None:
    pair = running_pair()
    for observed in pair.values():
        observed["rdma"] = {"present": False, "devices": {}}
    found = checks.gid_index_drift(pair, EXPECT)
    assert [(f.severity, f.summary) for f in found] == [
        (Severity.SKIPPED, "no RDMA device found")
    ] * 2


def test_mtu_mismatch_between_nodes() -> None:
    pair = healthy_pair()
    pair["spark-02"]["interfaces"]["enP2p1s0f1np1"]["mtu"] = 1500
    found = only_problems(checks.mtu_mismatch(pair, EXPECT))
    assert len(found) == 1
    assert found[0].severity is Severity.ERROR
    assert "enP2p1s0f1np1" in found[0].summary and "1500" in found[0].summary


def test_mtu_equal_but_not_configured_is_a_warning() -> None:
    pair = healthy_pair()
    for observed in pair.values():
        observed["interfaces"]["enp1s0f1np1"]["mtu"] = 4200
    found = only_problems(checks.mtu_mismatch(pair, EXPECT))
    assert [f.severity for f in found] == [Severity.WARNING]
    assert only_problems(checks.mtu_mismatch(pair, Expectations(rail_mtu=4200)))[0].summary.count(
        "enP2p1s0f1np1"
    )


def test_missing_or_down_rail_interface() -> None:
    pair = healthy_pair()
    pair["spark-01"]["interfaces"]["enp1s0f1np1"]["present"] = False
    pair["spark-02"]["interfaces"]["enP2p1s0f1np1"]["operstate"] = "down"
    found = only_problems(checks.mtu_mismatch(pair, EXPECT))
    summaries = sorted(f.summary for f in found)
    assert summaries == ["enP2p1s0f1np1 is down, not up", "rail interface enp1s0f1np1 is missing"]


def test_rdma_port_down() -> None:
    pair = healthy_pair()
    pair["spark-01"]["rdma"]["devices"]["roceP2p1s0f1"]["ports"]["1"]["state"] = "1: DOWN"
    found = only_problems(checks.rdma_port_state(pair, EXPECT))
    assert len(found) == 1 and "roceP2p1s0f1 port 1 is 1: DOWN" in found[0].summary


def test_rdma_ports_off_the_rail_are_not_checked() -> None:
    pair = healthy_pair()
    pair["spark-01"]["rdma"]["devices"]["rocep1s0f0"] = {
        "netdevs": ["enp1s0f0np0"],  # the CX-7's other port, uncabled
        "ports": {"1": {"state": "1: DOWN", "link_layer": "Ethernet", "gids": []}},
    }
    assert only_problems(checks.rdma_port_state(pair, EXPECT)) == []


def test_socket_fallback_in_service_log() -> None:
    pair = healthy_pair()
    lines = [
        "h:1:2 [0] NCCL INFO NET/IB : No device found.",
        "h:1:2 [0] NCCL INFO NET/Socket : Using [0]enp1s0f1np1:192.168.100.10<0>",
        "h:1:2 [0] NCCL INFO Using network Socket",
    ]
    pair["spark-01"]["units"]["dualspark-vllm-rank0.service"]["nccl_log"] = lines
    pair["spark-01"]["nccl_transport"] = nccl_log_reading(lines)
    found = only_problems(checks.socket_fallback(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-01", Severity.ERROR)]
    assert "NET/Socket" in found[0].summary
    assert "/dev/infiniband" in found[0].fix


def test_nccl_conf_in_image() -> None:
    pair = healthy_pair()
    pair["spark-02"]["image"]["nccl_conf"] = "NCCL_IB_DISABLE=1\nNCCL_SOCKET_IFNAME=eth0"
    found = only_problems(checks.nccl_conf_in_image(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-02", Severity.WARNING)]
    assert "NCCL_IB_DISABLE=1" in found[0].summary


@pytest.mark.parametrize(
    ("total", "free"),
    [(0, 940_604), (32_768, 9_751_756)],
    ids=["kho-scratch-uncounted", "kho-scratch-beside-a-cma-area"],
)
def test_cma_free_above_total_is_an_error_with_rdma(total: int, free: int) -> None:
    pair = healthy_pair()
    pair["spark-01"]["memory"].update(CmaTotal_kb=total, CmaFree_kb=free)
    found = only_problems(checks.cma(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-01", Severity.ERROR)]
    assert f"CmaFree {free} kB is above CmaTotal {total} kB" in found[0].summary
    assert "ibv_reg_mr" in found[0].summary
    assert "kho=off" in found[0].fix and "reboot" in found[0].fix


@pytest.mark.parametrize(
    ("total", "free", "text"),
    [(0, 0, "CMA 0 kB, 0 kB free"), (0, None, "CMA 0 kB"), (None, None, "no CMA")],
    ids=["kho-off", "no-free-line", "no-cma"],
)
def test_cma_of_zero_or_absent_is_healthy(total: int | None, free: int | None, text: str) -> None:
    pair = healthy_pair()
    pair["spark-02"]["memory"].update(CmaTotal_kb=total, CmaFree_kb=free)
    found = checks.cma(pair, EXPECT)
    assert only_problems(found) == []
    assert text in next(f.summary for f in found if f.host == "spark-02")


def test_cma_free_above_total_without_rdma_is_a_warning() -> None:
    pair = lab_pair()
    pair["spark-02"]["memory"].update(CmaTotal_kb=0, CmaFree_kb=940_604)
    found = only_problems(checks.cma(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-02", Severity.WARNING)]
    assert "no RDMA device found here" in found[0].summary


def test_memlock_flags_missing_from_unit() -> None:
    pair = healthy_pair()
    pair["spark-02"]["units"]["dualspark-vllm-rank1.service"]["memlock_unlimited"] = False
    found = only_problems(checks.memlock(pair, EXPECT))
    assert [f.severity for f in found] == [Severity.ERROR]
    assert "without --ulimit memlock=-1:-1" in found[0].summary
    assert "IPC_LOCK" not in found[0].summary


def test_memlock_gap_without_rdma_is_a_warning() -> None:
    pair = lab_pair()
    pair["spark-01"]["units"]["dualspark-vllm-rank0.service"]["ipc_lock"] = False
    found = only_problems(checks.memlock(pair, EXPECT))
    assert [f.severity for f in found] == [Severity.WARNING]
    assert "without --cap-add IPC_LOCK" in found[0].summary


def test_free_memory_low_before_launch() -> None:
    pair = healthy_pair()
    pair["spark-01"]["memory"]["MemAvailable_kb"] = 60 * 1024 * 1024
    found = only_problems(checks.free_memory(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-01", Severity.WARNING)]
    assert "60.0 GiB available" in found[0].summary
    assert "drop_caches" in found[0].fix


def test_free_memory_is_skipped_while_the_service_runs() -> None:
    pair = healthy_pair()
    pair["spark-01"]["memory"]["MemAvailable_kb"] = 1024
    pair["spark-01"]["units"]["dualspark-vllm-rank0.service"]["active"] = True
    found = checks.free_memory(pair, EXPECT)
    assert severities(found) == {Severity.SKIPPED, Severity.OK}


@pytest.mark.parametrize(
    ("change", "text"),
    [
        ({"id": "sha256:" + "0" * 64}, "different images"),
        ({"id": None, "present": False}, "missing on spark-02"),
    ],
)
def test_image_digest_differs_or_missing(change: dict[str, Any], text: str) -> None:
    pair = healthy_pair()
    pair["spark-02"]["image"].update(change)
    found = only_problems(checks.image_digest(pair, EXPECT))
    assert [f.severity for f in found] == [Severity.ERROR]
    assert text in found[0].summary


def test_clock_skew_and_unsynchronised_clock() -> None:
    pair = healthy_pair()
    pair["spark-02"]["clock"]["epoch"] += 3.0
    pair["spark-01"]["clock"]["ntp_synchronized"] = False
    found = only_problems(checks.clock_skew(pair, EXPECT))
    assert sorted((f.host, f.severity) for f in found) == [
        ("pair", Severity.WARNING),
        ("spark-01", Severity.WARNING),
    ]
    assert "3.05 s" in next(f.summary for f in found if f.host == "pair")


def test_lab_pair_skips_rdma_checks_and_says_why() -> None:
    findings = diagnose(lab_pair(), EXPECT)
    skipped = {(f.check, f.summary) for f in findings if f.severity is Severity.SKIPPED}
    assert ("gid_index_drift", "no RDMA device found") in skipped
    assert ("rdma_port_state", "no RDMA device found") in skipped
    assert any(check == "socket_fallback" for check, _ in skipped)
    cma_findings = [f for f in findings if f.check == "cma"]
    assert severities(cma_findings) == {Severity.OK}
    assert not [f for f in findings if f.severity is Severity.ERROR]


HANG = (
    "(Worker_TP1 pid=212) [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=12590, OpType=_ALLGATHER_BASE) ran for 600060 milliseconds before timing out."
)


def rank0_unit(pair: dict[str, Any]) -> dict[str, Any]:
    return pair["spark-01"]["units"]["dualspark-vllm-rank0.service"]


def test_the_nodes_nccl_mounted_is_ok_and_the_pip_build_a_warning() -> None:
    pair = healthy_pair()
    assert severities(checks.pip_nccl(pair, EXPECT)) == {Severity.OK}
    rank0_unit(pair)["system_nccl_mounted"] = False
    found = only_problems(checks.pip_nccl(pair, EXPECT))
    assert [(f.host, f.severity) for f in found] == [("spark-01", Severity.WARNING)]
    assert "vllm_tp2_service_system_nccl" in found[0].fix


def test_the_pip_build_with_the_hang_in_the_journal_is_an_error_quoting_it() -> None:
    pair = healthy_pair()
    rank0_unit(pair).update(system_nccl_mounted=False, hang_lines=[HANG])
    (found,) = only_problems(checks.pip_nccl(pair, EXPECT))
    assert (found.host, found.severity) == ("spark-01", Severity.ERROR)
    assert "Watchdog caught collective operation timeout" in found.summary
    assert "/usr/lib/aarch64-linux-gnu/libnccl.so.2" in found.fix


def test_pip_nccl_is_skipped_without_a_service_unit() -> None:
    pair = healthy_pair()
    rank0_unit(pair)["loaded"] = False
    findings = checks.pip_nccl(pair, EXPECT)
    assert [(f.host, f.severity) for f in findings] == [
        ("spark-01", Severity.SKIPPED),
        ("spark-02", Severity.OK),
    ]


def test_a_platform_changed_since_the_validated_run_is_a_warning_naming_it() -> None:
    pair = healthy_pair()
    assert severities(checks.platform_change(pair, EXPECT)) == {Severity.OK}
    change = "rocep1s0f1 firmware 28.45.1020 -> 28.46.1006"
    pair["spark-02"]["platform"]["since_validated"] = [change]
    (found,) = only_problems(checks.platform_change(pair, EXPECT))
    assert (found.host, found.severity) == ("spark-02", Severity.WARNING)
    assert change in found.summary
    assert "playbooks/validate.yml" in found.fix


def test_platform_change_is_skipped_where_no_run_was_validated() -> None:
    pair = healthy_pair()
    pair["spark-01"]["platform"]["since_validated"] = None
    findings = checks.platform_change(pair, EXPECT)
    assert [(f.host, f.severity) for f in findings] == [
        ("spark-01", Severity.SKIPPED),
        ("spark-02", Severity.OK),
    ]
    assert "validate.yml records one" in findings[0].summary
