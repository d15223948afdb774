"""Each pair's downtime in an update or a rollback: the role's downtime.yml turns the controller
times pair.yml and gate.yml note into one line per pair, for every way a roll ends, and
summary.yml says them all at the end of the run. Runs both in plays shaped like update.yml's
(one pair per batch, then the summary play) on local hosts, each pair given the times its roll
noted; then checks that the roll notes them where the downtime begins and ends."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import REPO, output_of, run_tool

TASKS = REPO / "roles/rolling_update/tasks"
STOPPED = 1748772002  # 2025-06-01T10:00:02Z
# Per pair: what its roll noted, as host facts of both of its nodes.
PAIRS: dict[str, dict[str, Any]] = {
    "pair_rolled": {
        "rolling_update_pair_rolls": True,
        "rolling_update_down_at": STOPPED,
        "rolling_update_up_at": STOPPED + 74.4,
    },
    "pair_returned": {
        "rolling_update_pair_rolls": True,
        "rolling_update_down_at": STOPPED,
        "rolling_update_up_at": STOPPED + 95,
        "rolling_update_returning": True,
    },
    "pair_down": {
        "rolling_update_pair_rolls": True,
        "rolling_update_down_at": STOPPED,
        "rolling_update_up_at": None,
        "rolling_update_returning": True,
    },
    "pair_unchanged": {"rolling_update_pair_rolls": False},
    "pair_refused": {},
}
LINES = {
    "pair_rolled": (
        "74 s, from 2025-06-01T10:00:02Z (the drain of rank 0 began) to 2025-06-01T10:01:16Z"
        " (readiness gate passed on release r2)"
    ),
    "pair_returned": (
        "95 s, from 2025-06-01T10:00:02Z (the drain of rank 0 began) to 2025-06-01T10:01:37Z"
        " (readiness passed again after the return to release r1)"
    ),
    "pair_unchanged": "none, it already ran its declared records (gated, not restarted)",
    "pair_refused": "none, the run on this pair ended before the drain of rank 0",
}
STILL_DOWN = re.compile(
    r"still down, since 2025-06-01T10:00:02Z \(the drain of rank 0 began; (\d+) s by the end of"
    r" its roll\): the way back never passed readiness"
)


def inventory(pairs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    children = {}
    for index, (name, facts) in enumerate(pairs.items()):
        hosts = {
            f"h{2 * index}": {"spark_pair_rank": 0},
            f"h{2 * index + 1}": {"spark_pair_rank": 1},
        }
        children[name] = {"hosts": hosts, "vars": {"spark_pair_name": name, **facts}}
    return {
        "dualspark": {
            "children": children,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "rolling_update_target_release": "r2",
                "rolling_update_return_release": "r1",
            },
        }
    }


def _tasks(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((TASKS / name).read_text(encoding="utf-8"))


def _names(tasks: list[dict[str, Any]]) -> list[str]:
    return [task["name"] for task in tasks]


def _roll() -> dict[str, Any]:
    (roll,) = [
        task for task in _tasks("pair.yml") if task["name"] == "Roll the pair under its lock"
    ]
    return roll


# update.yml's roll in the small (pair.yml's `always`: the downtime worked out and said), then
# its summary play as update.yml has it.
PLAYS = [
    {
        "hosts": "dualspark",
        "gather_facts": False,
        "serial": 2,
        "order": "inventory",
        "any_errors_fatal": True,
        "tasks": [
            {"ansible.builtin.include_tasks": str(TASKS / "downtime.yml")},
            _roll()["always"][-1],  # pair.yml's own line
        ],
    },
    yaml.safe_load((REPO / "playbooks/update.yml").read_text(encoding="utf-8"))[-1],
]


def run_plays(directory: Path, pairs: dict[str, dict[str, Any]], *args: str) -> str:
    hosts = yaml.safe_dump(inventory(pairs), sort_keys=False)  # the pairs roll in this order
    (directory / "hosts.yml").write_text(hosts, encoding="utf-8")
    (directory / "roll.yml").write_text(yaml.safe_dump(PLAYS, sort_keys=False), encoding="utf-8")
    result = run_tool(
        "env",
        f"ANSIBLE_ROLES_PATH={REPO / 'roles'}",
        "ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json",
        "ansible-playbook",
        "-i",
        "hosts.yml",
        *args,
        "roll.yml",
        cwd=directory,
        timeout=300,
    )
    assert result.returncode == 0, output_of(result)
    return result.stdout


def debug_messages(stdout: str) -> list[Any]:
    """Every debug message of the run, in order (one per task: the ones here run once)."""
    messages = []
    for play in json.loads(stdout)["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if "msg" in result and "Say how long" in task["task"]["name"]:
                    messages.append(result["msg"])
    return messages


@pytest.fixture(scope="module")
def messages(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    return debug_messages(run_plays(tmp_path_factory.mktemp("downtime"), PAIRS))


def test_each_pair_says_its_downtime_after_its_roll(messages: list[Any]) -> None:
    lines = [message for message in messages if isinstance(message, str)]
    assert len(lines) == len(PAIRS), lines
    for pair, text in LINES.items():
        assert f"Downtime of pair {pair}: {text}" in lines, lines
    (down,) = [line for line in lines if line.startswith("Downtime of pair pair_down: ")]
    match = STILL_DOWN.search(down)
    assert match and int(match.group(1)) > 3600, down  # since 2025: long down by now


def test_the_summary_has_one_line_a_pair_in_roll_order(messages: list[Any]) -> None:
    (summary,) = [message for message in messages if isinstance(message, list)]
    assert summary[0] == (
        "Downtime per pair, from the drain of rank 0 to the readiness gate passing again:"
    )
    assert [line.split(": ", 1)[0] for line in summary[1:]] == list(PAIRS)
    for pair, text in LINES.items():
        assert f"{pair}: {text}" in summary, summary
    assert STILL_DOWN.search(summary[3]), summary


def test_check_mode_says_there_is_no_downtime_yet(tmp_path: Path) -> None:
    pairs = {
        "pair_rolls": {"rolling_update_pair_rolls": True},
        "pair_unchanged": PAIRS["pair_unchanged"],
    }
    summary = debug_messages(run_plays(tmp_path, pairs, "--check"))[-1]
    assert summary[1:] == [
        "pair_rolls: none in check mode; a real run keeps it down from the drain of rank 0 to the"
        " readiness gate on release r2",
        f"pair_unchanged: {LINES['pair_unchanged']}",
    ]


def test_the_roll_notes_when_the_pair_stops_and_when_it_serves_again() -> None:
    roll = _roll()
    (rolls,) = [task for task in roll["block"] if task["name"] == "Roll the pair"]
    # Down from the moment rank 0's drain begins: the roll's first step, right before the drain.
    first, drain = rolls["block"][:2]
    assert "rolling_update_down_at" in first["ansible.builtin.set_fact"]
    assert drain["ansible.builtin.include_tasks"] == "drain.yml"
    assert rolls["rescue"][0]["ansible.builtin.include_tasks"] == "recover.yml"
    assert _names(roll["always"])[-2:] == [
        "Work out how long the pair was down",
        "Say how long the pair was down",
    ]
    # Up again once the readiness gate passes, before the smoke test, where this run stopped it.
    gate = _tasks("gate.yml")
    assert [task.get("ansible.builtin.include_role", {}).get("tasks_from") for task in gate] == [
        "readiness.yml",
        None,
        "smoke.yml",
        None,
    ]
    # Behind a front door, its own gates come after the pair's: the pair serves its clients again
    # only then, but it was ready (and so no longer down) at the readiness gate.
    assert gate[-1]["ansible.builtin.include_tasks"] == "front_door.yml"
    assert "rolling_update_up_at" in gate[1]["ansible.builtin.set_fact"]
    assert gate[1]["when"] == "rolling_update_down_at is defined"
    # A failed roll stays down until its way back passes readiness, whatever the roll passed.
    recover = _tasks("recover.yml")
    assert recover[0]["ansible.builtin.set_fact"] == {
        "rolling_update_up_at": None,
        "rolling_update_returning": True,
    }
    (back,) = [task for task in recover if "block" in task]
    assert back["rescue"][0]["ansible.builtin.include_tasks"] == "downtime.yml"
    assert recover[-2]["ansible.builtin.include_tasks"] == "downtime.yml"
    for failure in (back["rescue"][-1], recover[-1]):
        assert (
            "Downtime: {{ rolling_update_downtime.text }}" in failure["ansible.builtin.fail"]["msg"]
        )


@pytest.mark.parametrize("playbook", ["playbooks/update.yml", "playbooks/rollback.yml"])
def test_the_run_ends_with_the_summary(playbook: str) -> None:
    last = yaml.safe_load((REPO / playbook).read_text(encoding="utf-8"))[-1]
    assert last["hosts"] == "dualspark"
    (task,) = last["tasks"]
    assert task["ansible.builtin.include_role"] == {
        "name": "rolling_update",
        "tasks_from": "summary.yml",
    }
