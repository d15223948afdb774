"""The doctor's judge: findings sorted errors first with counts and text, and the role's judge.yml
running its module on two hosts' observations as pair_doctor_collect.py gives them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from pair_doctor.judge import judge

from tests.helpers import REPO, output_of, run_tool
from tests.pair_doctor.healthy_pair import healthy_pair


def test_findings_sorted_errors_first_with_counts() -> None:
    pair = healthy_pair()
    pair["spark-02"]["interfaces"]["enp1s0f1np1"]["mtu"] = 1500
    result = judge(pair, {"rail_mtu": 9000})
    assert result["findings"][0]["severity"] == "error"
    assert result["findings"][0]["check"] == "mtu_mismatch"
    assert result["counts"]["error"] == 1
    assert result["counts"]["warning"] == 0
    assert result["text"][0].startswith("[ERROR] mtu_mismatch (pair): enp1s0f1np1 MTU differs")
    assert result["text"][1].startswith("    fix: re-run playbooks/network.yml")


def test_only_runs_the_named_checks() -> None:
    result = judge(healthy_pair(), only=["cma"])
    assert {f["check"] for f in result["findings"]} == {"cma"}


@pytest.mark.parametrize(
    ("request_body", "error"),
    [
        ({"observations": {}, "only": ["no_such_check"]}, ValueError),
        ({"observations": {}, "expectations": {"rail_mut": 9000}}, ValueError),
        ({"observations": {"spark-01": {}}}, KeyError),
    ],
)
def test_bad_requests_are_refused(request_body: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        judge(**request_body)


def judge_in_a_play(tmp_path: Path, pair: dict[str, dict[str, Any]]) -> tuple[int, str, Any]:
    """Run judge.yml on two local hosts holding ``pair``'s observations, as observe.yml leaves
    them; the exit code, the output and rank 0's pair_doctor_judged."""
    hosts = {
        host: {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(REPO / ".venv/bin/python"),
            "spark_pair_rank": rank,
            # What the judge module gets: the collector's output, without the transport it reads.
            "pair_doctor_observations": {k: v for k, v in node.items() if k != "nccl_transport"},
        }
        for rank, (host, node) in enumerate(pair.items())
    }
    inventory = {"all": {"children": {"pair1": {"hosts": hosts}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    out = tmp_path / "judged.json"
    play = [
        {
            "hosts": "pair1",
            "gather_facts": False,
            "vars": {
                "spark_pair_name": "pair1",
                "pair_doctor_rail_interfaces": ["enp1s0f1np1", "enP2p1s0f1np1"],
            },
            "tasks": [
                {
                    "name": "Judge",
                    "block": [
                        {
                            "ansible.builtin.include_role": {
                                "name": str(REPO / "roles/pair_doctor"),
                                "tasks_from": "judge.yml",
                            }
                        }
                    ],
                    "always": [
                        {
                            "ansible.builtin.copy": {
                                "dest": str(out),
                                "mode": "0600",
                                "content": "{{ pair_doctor_judged | to_json }}",
                            },
                            "delegate_to": "localhost",
                            "when": "spark_pair_rank == 0",
                        }
                    ],
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    result = run_tool("ansible-playbook", "-i", "hosts.yml", "play.yml", cwd=tmp_path, timeout=300)
    judged = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    return result.returncode, output_of(result, 300), judged


def test_judge_yml_reads_the_transport_and_passes_a_healthy_pair(tmp_path: Path) -> None:
    code, output, judged = judge_in_a_play(tmp_path, healthy_pair())
    assert code == 0, output
    assert judged["counts"]["error"] == 0, judged["text"]
    transports = [f["summary"] for f in judged["findings"] if f["check"] == "socket_fallback"]
    assert transports == ["NCCL uses NET/IB over rocep1s0f1, roceP2p1s0f1"] * 2
    assert "pair pair1: no error" in output


def test_judge_yml_fails_on_an_error_naming_its_count(tmp_path: Path) -> None:
    pair = healthy_pair()
    pair["spark-02"]["image"]["id"] = "sha256:" + "9" * 64
    code, output, judged = judge_in_a_play(tmp_path, pair)
    assert code != 0
    assert judged["counts"]["error"] == 1
    assert "pair pair1: 1 error(s) found; each finding above carries its fix." in output
