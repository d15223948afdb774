"""update.yml and rollback.yml check that every front door answers before any pair changes: a
pair's roll leaves the front door first, so with a door that does not answer the roll (and the way
back) would fail at its first step. Runs the playbooks' check in a play shaped like theirs."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers import REPO, output_of, run_tool

CHECK = REPO / "playbooks/tasks/front_doors_answer.yml"
LOCAL = {
    "ansible_connection": "local",
    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
}
# Nothing listens on port 9 of this machine: an SSH connection there is refused at once.
GONE = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9}


def run_check(directory: Path, doors: dict[str, dict[str, object]]) -> str:
    inventory = {
        "dualspark": {"hosts": {"h0": LOCAL, "h1": LOCAL}},
        "front_door": {"hosts": doors},
    }
    play = [
        {
            "hosts": "dualspark",
            "gather_facts": False,
            "any_errors_fatal": True,
            "pre_tasks": [{"ansible.builtin.include_tasks": str(CHECK)}],
            "tasks": [{"name": "Stage", "ansible.builtin.debug": {"msg": "STAGED"}}],
        }
    ]
    (directory / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    (directory / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False), encoding="utf-8")
    result = run_tool("ansible-playbook", "-i", "hosts.yml", "play.yml", cwd=directory)
    return f"rc={result.returncode}\n{output_of(result, 80)}"


def test_doors_that_answer_let_the_run_go_on(tmp_path: Path) -> None:
    said = run_check(tmp_path, {"door-01": LOCAL, "door-02": LOCAL})
    assert said.startswith("rc=0") and "STAGED" in said, said


def test_a_door_that_does_not_answer_stops_the_run_naming_it(tmp_path: Path) -> None:
    doors = ["door-02"]  # each is given 20 s
    said = run_check(tmp_path, {"door-01": LOCAL, **{door: GONE for door in doors}})
    assert said.startswith("rc=2"), said
    assert "STAGED" not in said, said
    message = " ".join(said.split())
    assert f"The front door host {', '.join(doors)} does not answer" in message, said
    assert "Nothing was staged, stopped or changed" in message, said
