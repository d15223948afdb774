"""A node that stops answering in the middle of a roll: its peer must not try to return the pair
alone, and no later pair may roll. Runs the rolling_update role's guards (earlier_pairs.yml,
answering.yml) in a play shaped like update.yml's roll, on local hosts, one of which is made
unreachable by a test double (tests/update/lost_node/lost.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO, output_of, run_tool

TASKS = REPO / "roles/rolling_update/tasks"
LOCAL = {
    "ansible_connection": "local",
    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
}
INVENTORY = {
    "dualspark": {
        "children": {
            name: {"hosts": dict.fromkeys(hosts), "vars": {"spark_pair_name": name}}
            for name, hosts in (("pair_one", ("h0", "h1")), ("pair_two", ("h2", "h3")))
        },
        "vars": LOCAL,
    }
}


def roll_play(lost: str, fail: str) -> list[dict[str, object]]:
    """update.yml's roll in the small: the real guards around a block that loses or fails a node."""
    return [
        {
            "hosts": "dualspark",
            "gather_facts": False,
            "serial": 2,
            "order": "inventory",
            "any_errors_fatal": True,
            "vars": {"rolling_update_from_release": "r1", "rolling_update_target_release": "r2"},
            "tasks": [
                {"ansible.builtin.include_tasks": str(TASKS / "earlier_pairs.yml")},
                {
                    "block": [
                        {
                            "name": "Lose a node",
                            "ansible.builtin.set_fact": {"ansible_connection": "lost"},
                            "when": f"inventory_hostname == '{lost}'",
                        },
                        {
                            "name": "Fail a node",
                            "ansible.builtin.fail": {"msg": "gate failed"},
                            "when": f"inventory_hostname == '{fail}'",
                        },
                        {"name": "Roll", "ansible.builtin.ping": {}},
                    ],
                    "rescue": [
                        {"ansible.builtin.include_tasks": str(TASKS / "answering.yml")},
                        {"ansible.builtin.debug": {"msg": "RETURNING THE PAIR"}},
                        {"ansible.builtin.fail": {"msg": "returned, failed"}},
                    ],
                },
            ],
        }
    ]


def run_roll(tmp_path: Path, lost: str = "", fail: str = "") -> str:
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(INVENTORY))
    (tmp_path / "roll.yml").write_text(yaml.safe_dump(roll_play(lost, fail), sort_keys=False))
    result = run_tool(
        "env",
        f"ANSIBLE_CONNECTION_PLUGINS={Path(__file__).parent / 'lost_node'}",
        "ANSIBLE_HOST_KEY_CHECKING=0",
        "ansible-playbook",
        "-i",
        "hosts.yml",
        "roll.yml",
        cwd=tmp_path,
        timeout=300,
    )
    output = output_of(result, 400)
    assert result.returncode != 0, output
    return output


def recap(output: str, host: str) -> str:
    return next(line for line in output.splitlines() if line.startswith(f"{host} "))


@pytest.mark.parametrize("lost", ["h0", "h1"])
def test_a_lost_node_stops_the_pair_and_every_later_pair(tmp_path: Path, lost: str) -> None:
    output = run_roll(tmp_path, lost=lost)
    assert f"UPDATE FAILED on pair pair_one: {lost} stopped answering" in output, output
    assert "RETURNING THE PAIR" not in output, output
    assert "An earlier pair of this run failed or stopped answering" in output, output
    for later in ("h2", "h3"):  # stopped by the guard, before any task of the roll
        assert f"ok: [{later}]" not in output and "failed=1" in recap(output, later), output


def test_a_failed_node_is_returned_with_its_peer(tmp_path: Path) -> None:
    output = run_roll(tmp_path, fail="h1")
    assert "UPDATE FAILED on pair pair_one" not in output, output
    assert output.count('"msg": "RETURNING THE PAIR"') == 2, output
    assert "h2" not in output, output  # the play ends with the pair: every host of it failed
