"""The readiness gate's record of the pair's load to ready (vllm_tp2_service ready_record.yml):
written on rank 0 only, from the earlier container start of the two ranks and the moment rank 0's
unit turned active; the same pair gives the same record (nothing changes), a new start a new one;
and pair_benchmark reads it. The task file runs on two local hosts, with test doubles for the
docker and systemctl commands it asks (a lab host has no vLLM container to ask)."""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import yaml
from pair_benchmark.load_to_ready import load_to_ready

from tests.helpers import REPO, output_of, run_tool

TASKS = REPO / "roles/vllm_tp2_service/tasks/ready_record.yml"
READY_AT = 1748772252  # 2025-06-01T10:04:12Z

# Each double answers only the exact question the task file asks, as the real command would.
DOCKER_DOUBLE = """\
import json, os, sys
state = json.load(open(os.environ["DOUBLE_STATE"]))
args = sys.argv[1:]
if args[:3] != ["inspect", "--format", "{{.State.StartedAt}}"] or len(args) != 4:
    sys.exit(f"docker double: unexpected arguments {args}")
if args[3] not in state["containers"]:
    print(f"Error: No such object: {args[3]}", file=sys.stderr)
    sys.exit(1)
print(state["containers"][args[3]])
"""
SYSTEMCTL_DOUBLE = """\
import json, os, sys
state = json.load(open(os.environ["DOUBLE_STATE"]))
args = sys.argv[1:]
if args[:5] != ["show", "--timestamp=unix", "-p", "ActiveEnterTimestamp", "--value"]:
    sys.exit(f"systemctl double: unexpected arguments {args}")
print(state["active"].get(args[5], ""))
"""


def write_doubles(directory: Path) -> Path:
    bin_dir = directory / "bin"
    bin_dir.mkdir()
    for name, text in (("docker", DOCKER_DOUBLE), ("systemctl", SYSTEMCTL_DOUBLE)):
        (bin_dir / name).write_text(f"#!{sys.executable}\n{text}", encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def set_state(directory: Path, rank0: str, rank1: str | None, active: int) -> None:
    containers = {"vllm-tp2-rank0": rank0} | ({"vllm-tp2-rank1": rank1} if rank1 else {})
    state = {"containers": containers, "active": {"vllm-tp2-rank0": f"@{active}"}}
    (directory / "state.json").write_text(json.dumps(state), encoding="utf-8")


def run_gate_record(directory: Path) -> tuple[int, str]:
    bin_dir = directory / "bin"
    if not bin_dir.exists():
        write_doubles(directory)
    inventory = {
        "pair_one": {
            "hosts": {
                "h0": {"spark_pair_rank": 0, "vllm_tp2_service_container_name": "vllm-tp2-rank0"},
                "h1": {"spark_pair_rank": 1, "vllm_tp2_service_container_name": "vllm-tp2-rank1"},
            },
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "spark_pair_name": "pair_one",
                "spark_pair_rank1_host": "h1",
                "vllm_tp2_service_unit": "vllm-tp2-rank{{ spark_pair_rank }}",
                "vllm_tp2_service_docker": str(bin_dir / "docker"),
                "vllm_tp2_service_ready_record": str(directory / "run/vllm-tp2-rank0.ready.json"),
            },
        }
    }
    play = [
        {
            "hosts": "pair_one",
            "gather_facts": False,
            "tasks": [{"ansible.builtin.include_tasks": str(TASKS)}],
        }
    ]
    (directory / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    (directory / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    result = run_tool(
        "env",
        f"PATH={bin_dir}{os.pathsep}{REPO / '.venv/bin'}{os.pathsep}{os.environ['PATH']}",
        f"DOUBLE_STATE={directory / 'state.json'}",
        "ansible-playbook",
        "-i",
        "hosts.yml",
        "play.yml",
        cwd=directory,
        timeout=300,
    )
    return result.returncode, output_of(result)


def changed(output: str, host: str) -> int:
    match = re.search(rf"^{host} +: ok=\d+ +changed=(\d+)", output, flags=re.MULTILINE)
    assert match, output
    return int(match.group(1))


def record(directory: Path) -> dict[str, object]:
    return json.loads((directory / "run/vllm-tp2-rank0.ready.json").read_text(encoding="utf-8"))


def test_rank_0_records_the_earlier_start_and_the_first_answer(tmp_path: Path) -> None:
    set_state(tmp_path, "2025-06-01T10:00:31.123456789Z", "2025-06-01T10:00:00.25Z", READY_AT)
    code, output = run_gate_record(tmp_path)
    assert code == 0, output
    assert record(tmp_path) == {
        "pair": "pair_one",
        "started": "2025-06-01T10:00:00Z",  # rank 1's, which starts first
        "ready": datetime.fromtimestamp(READY_AT, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "container_started": {
            "0": "2025-06-01T10:00:31.123456789Z",
            "1": "2025-06-01T10:00:00.25Z",
        },
    }
    assert [path.name for path in (tmp_path / "run").iterdir()] == ["vllm-tp2-rank0.ready.json"]
    assert changed(output, "h0") >= 1 and changed(output, "h1") == 0
    # What the benchmark reports from it, with rank 0's container still the one recorded.
    load = load_to_ready(
        (tmp_path / "run/vllm-tp2-rank0.ready.json").read_text(encoding="utf-8"),
        "2025-06-01T10:00:31.123456789Z",
    )
    assert load.seconds == 252 and load.note == ""


def test_the_same_pair_changes_nothing_and_a_new_start_writes_anew(tmp_path: Path) -> None:
    set_state(tmp_path, "2025-06-01T10:00:31Z", "2025-06-01T10:00:00Z", READY_AT)
    assert run_gate_record(tmp_path)[0] == 0
    code, output = run_gate_record(tmp_path)
    assert code == 0, output
    assert changed(output, "h0") == 0, output
    set_state(tmp_path, "2025-06-02T08:00:05Z", "2025-06-02T08:00:01Z", READY_AT + 86400)
    code, output = run_gate_record(tmp_path)
    assert code == 0, output
    assert changed(output, "h0") == 1, output
    assert record(tmp_path)["started"] == "2025-06-02T08:00:01Z"
    assert record(tmp_path)["ready"] == "2025-06-02T10:04:12Z"


def test_no_record_without_both_starts_and_the_gate_goes_on(tmp_path: Path) -> None:
    set_state(tmp_path, "2025-06-01T10:00:31Z", None, READY_AT)
    code, output = run_gate_record(tmp_path)
    assert code == 0, output
    assert not (tmp_path / "run").exists()
