"""The role's task files as the integrating playbooks call them, in one ansible-playbook run on
this machine against the shared front door: drain.yml, gate.yml and restore.yml from a pair's
play (delegated to the front-door host, once), their no-op without a front door, then
validate.yml on the front-door host. doctor.yml's judgement is tested on its own expressions
(its reading tasks are validate.yml's and two commands)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from tests.ansible_trust import trusted
from tests.front_door.door import CLIENT_KEYS, CTL, FrontDoorUnderTest
from tests.front_door.render import role_file, role_variables
from tests.helpers import REPO, output_of, run_tool

INVENTORY = {
    "all": {
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
        },
        "children": {
            "dualspark": {
                "children": {
                    "pair_one": {
                        "vars": {"spark_pair_name": "pair_one"},
                        "hosts": {
                            "spark-a": {"spark_pair_rank": 0},
                            "spark-b": {"spark_pair_rank": 1},
                        },
                    }
                }
            },
            "front_door": {"hosts": {"door": None}},
        },
    }
}


def include(tasks_from: str, **params: Any) -> dict[str, Any]:
    return {
        "name": f"front_door {tasks_from}",
        "ansible.builtin.include_role": {"name": "front_door", "tasks_from": tasks_from},
        "vars": params,
    }


PLAYS = [
    {
        "name": "A pair's roll through the front door",
        "hosts": "pair_one",
        "gather_facts": False,
        "tasks": [
            include("drain.yml", front_door_pair="pair_one"),
            {
                "name": "Check that pair_one was drained",
                "ansible.builtin.assert": {
                    "that": [
                        "front_door_drained is changed",
                        "'pair_one: drained' in front_door_drained.stdout",
                    ]
                },
            },
            include("gate.yml", front_door_pair="pair_one", front_door_gate_prompt="2 + 2 ="),
            {
                "name": "Check the gate's answer",
                "ansible.builtin.assert": {
                    "that": [
                        "front_door_gate_result.pair == 'pair_one'",
                        "front_door_gate_result.answer == ' 4'",
                    ]
                },
            },
            include("restore.yml", front_door_pair="pair_one"),
            {
                "name": "Check that pair_one was restored",
                "ansible.builtin.assert": {
                    "that": [
                        "front_door_restored is changed",
                        "'pair_one: UP and taking requests' in front_door_restored.stdout",
                    ]
                },
            },
            include("drain.yml", front_door_pair="pair_one", front_door_host=""),
        ],
    },
    {
        "name": "The front door's own checks",
        "hosts": "front_door",
        "gather_facts": False,
        "tasks": [
            include("validate.yml"),
        ],
    },
]


def test_drain_gate_restore_and_validate_in_a_play(
    door: FrontDoorUnderTest, tmp_path: Path
) -> None:
    settings = {
        "front_door_python": sys.executable,
        "front_door_ctl": str(CTL),
        "front_door_stats_socket": door.socket,
        "front_door_config_path": str(door.config),
        "front_door_certificate_path": str(door.certificate),
        "front_door_tls_generate": True,
        "front_door_tls_names": ["door.test"],
        "front_door_bind": "127.0.0.1",
        "front_door_port": door.variables["front_door_port"],
        "front_door_gate_port": door.variables["front_door_gate_port"],
        "front_door_api_keys": [{"name": "gatekeeper", "key": CLIENT_KEYS["gatekeeper"]}],
        "front_door_drain_timeout_s": 10,
        "front_door_restore_timeout_s": 10,
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(INVENTORY), encoding="utf-8")
    (tmp_path / "play.yml").write_text(yaml.safe_dump(PLAYS, sort_keys=False), encoding="utf-8")
    (tmp_path / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    result = run_tool(
        "env",
        f"ANSIBLE_ROLES_PATH={REPO / 'roles'}",
        "ansible-playbook",
        "-i",
        "hosts.yml",
        "-e",
        "@settings.json",
        "play.yml",
        cwd=tmp_path,
        timeout=300,
    )
    text = output_of(result, 400)
    assert result.returncode == 0, text
    assert (
        "No front door in the inventory (group front_door): pair_one is not drained there." in text
    )
    assert "Every pair UP at the front door: pair_one, pair_three, pair_two" in text
    assert (
        "TLS as door.test: /v1/models answers 200 to a client's key and 401 to a refused one"
        in text
    )
    assert all(state.status == "UP" for state in door.states().values())
    for key in CLIENT_KEYS.values():
        assert key not in text


def judged(**registered: Any) -> list[dict[str, str]]:
    """doctor.yml's findings for what its reading tasks registered."""
    (judge,) = [t for t in role_file("tasks/doctor.yml") if t["name"] == "Judge what was read"]
    variables = trusted({**role_variables({}), **judge["vars"], **registered})
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(
        trusted(judge["ansible.builtin.set_fact"]["front_door_doctor_findings"])
    )


def reported(findings: list[dict[str, str]]) -> list[str]:
    """What doctor.yml prints for `findings`."""
    (report,) = [t for t in role_file("tasks/doctor.yml") if t["name"].startswith("Report")]
    variables = trusted(
        {**role_variables({}), "front_door_doctor_findings": findings, "inventory_hostname": "d"}
    )
    templar = Templar(loader=DataLoader(), variables=variables)
    return templar.template(trusted(report["ansible.builtin.debug"]["msg"]))


HEALTHY: dict[str, Any] = {
    "front_door_doctor_config": {"rc": 0, "stdout": "", "stderr": ""},
    "front_door_doctor_status": {
        "rc": 0,
        "stdout": json.dumps(
            {
                "pairs": [
                    {
                        "name": "pair_one",
                        "status": "UP",
                        "health": "UP",
                        "check_status": "L7OK",
                        "check_code": "200",
                        "last_check": "",
                    }
                ]
            }
        ),
        "stderr": "",
    },
    "front_door_certificate": {
        "readable": True,
        "end": "Dec 31 00:00:00 2030 GMT",
        "expired": False,
        "expiring": False,
        "error": "",
    },
}


def test_the_doctor_finds_nothing_wrong_with_a_healthy_front_door() -> None:
    assert judged(**HEALTHY) == []
    assert reported([]) == ["The front door on d: no finding."]


def test_the_doctor_names_each_error_with_its_fix() -> None:
    down = {
        "name": "pair_one",
        "status": "DOWN",
        "health": "DOWN",
        "check_status": "L7STS",
        "check_code": "401",
        "last_check": "Unauthorized comment: GET /v1/models with the pair's key",
    }
    findings = judged(
        **{
            **HEALTHY,
            "front_door_doctor_config": {
                "rc": 1,
                "stdout": "",
                "stderr": "[NOTICE] x\n[ALERT] (1) : config : parsing [haproxy.cfg:9] : "
                "unable to stat SSL certificate\n[ALERT] (1) : Fatal errors found.",
            },
            "front_door_doctor_status": {
                **HEALTHY["front_door_doctor_status"],
                "stdout": json.dumps({"pairs": [down]}),
            },
            "front_door_certificate": {
                **HEALTHY["front_door_certificate"],
                "expired": True,
                "expiring": True,
            },
        }
    )
    checks = {f["check"]: f for f in findings}
    assert set(checks) == {"config", "pair_down", "certificate"}
    assert all(f["severity"] == "error" for f in findings)
    assert "unable to stat SSL certificate" in checks["config"]["finding"]
    assert "L7STS 401" in checks["pair_down"]["finding"]
    assert "another key" in checks["pair_down"]["fix"]
    assert "expired on Dec 31 00:00:00 2030 GMT" in checks["certificate"]["finding"]
    lines = reported(
        [{"severity": "warning", "check": "w", "finding": "late", "fix": "x"}, *findings]
    )
    assert [line.split(":")[0] for line in lines] == [
        "ERROR config",
        "ERROR pair_down",
        "ERROR certificate",
        "WARNING w",
    ]
    assert "  " not in lines[1]
    assert ". Fix: L4CON/L4TOUT: the pair API is not listening" in lines[1]


def test_the_doctor_says_when_haproxy_does_not_answer() -> None:
    findings = judged(
        **{
            **HEALTHY,
            "front_door_doctor_status": {
                "rc": 1,
                "stdout": "",
                "stderr": "front_door_ctl status: cannot reach HAProxy's runtime API at /run/x",
            },
        }
    )
    assert [(f["severity"], f["check"]) for f in findings] == [("error", "runtime_api")]
    assert "systemctl status haproxy" in findings[0]["fix"]
