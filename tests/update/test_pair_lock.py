"""The pair lock (rolling_update lock.yml, lock_node.yml, unlock.yml) on this machine, the lock
file in a tmp dir: a run takes it naming itself, a second run refuses with that name and the fix,
it goes on success and on failure, a stale one is broken only with rolling_update_break_lock, and
check mode takes and breaks nothing. The run owner helper (files/run_owner.py) is tested alone."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.helpers import REPO, output_of, run_local_play, run_tool

ROLES = f"ANSIBLE_ROLES_PATH={REPO / 'roles'}"
HOST = socket.gethostname()


def lock_play(lock: Path, *, body: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Take the pair's lock, run ``body`` under it, release it: as pair.yml and service.yml do."""
    return [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "spark_pair_name": "pair_one",
                "spark_pair_rank": 0,
                "rolling_update_lock_path": str(lock),
            },
            "tasks": [
                {
                    "name": "Under the pair's lock",
                    "block": [
                        {
                            "ansible.builtin.include_role": {
                                "name": "rolling_update",
                                "tasks_from": "lock.yml",
                            }
                        },
                        *(body or []),
                    ],
                    "always": [
                        {
                            "ansible.builtin.include_role": {
                                "name": "rolling_update",
                                "tasks_from": "unlock.yml",
                            }
                        }
                    ],
                }
            ],
        }
    ]


def run(directory: Path, plays: list[dict[str, Any]], *args: str) -> tuple[int, str]:
    result = run_local_play(directory, plays, ROLES, args=args)
    return result.returncode, " ".join(output_of(result, 300).split())


def fields(lock: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in lock.read_text(encoding="utf-8").splitlines())


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def stale_lock(lock: Path, controller: str) -> str:
    pid = dead_pid()
    run_id = f"{controller}:{pid}:1700000000"
    lock.write_text(
        f"run={run_id}\nplaybook=/srv/dualspark/playbooks/update.yml\nuser=alice\n"
        f"controller={controller}\npid={pid}\nstarted=2023-11-14T22:13:20Z\npair=pair_one\n"
        "host=localhost\ntaken=2023-11-14T22:13:21Z\n",
        encoding="utf-8",
    )
    return run_id


def test_a_second_run_refuses_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    lock, stop = tmp_path / "pair.lock", tmp_path / "stop"
    holder_body = [
        {"ansible.builtin.wait_for": {"path": str(stop), "timeout": 240}},
    ]
    holder: dict[str, tuple[int, str]] = {}
    first = lock_play(lock, body=holder_body)
    thread = threading.Thread(target=lambda: holder.update(first=run(tmp_path / "first", first)))
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while not lock.exists() and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.2)
        assert lock.exists(), holder
        owner = fields(lock)
        # The lock names the run: its controller, user, the pid of its ansible-playbook (running
        # now), its playbook and start time; the node and pair it locks, and when.
        assert owner["controller"] == HOST
        assert owner["run"] == f"{HOST}:{owner['pid']}:{owner['run'].rsplit(':', 1)[1]}"
        cmdline = Path(f"/proc/{owner['pid']}/cmdline").read_bytes().decode()
        assert "ansible-playbook" in cmdline, cmdline
        assert owner["playbook"] == str(tmp_path / "first/play.yml")
        assert owner["user"] and owner["started"].endswith("Z") and owner["taken"].endswith("Z")
        assert (owner["pair"], owner["host"]) == ("pair_one", "localhost")
        held = lock.read_bytes()

        code, output = run(tmp_path / "second", lock_play(lock))
        assert code != 0, output
        assert f"Pair pair_one is locked: localhost holds {lock}" in output, output
        assert f"{owner['playbook']} run by {owner['user']}@{HOST} (pid {owner['pid']}" in output
        assert f"started {owner['started']}" in output, output
        assert "-e rolling_update_break_lock=true" in output, output
        assert lock.read_bytes() == held, "the refused run must leave the holder's lock alone"

        # Breaking the lock of a run that still runs on this controller is refused.
        breaking = ("-e", "rolling_update_break_lock=true")
        code, output = run(tmp_path / "third", lock_play(lock), *breaking)
        assert code != 0, output
        assert "still runs" in output and f"pid {owner['pid']}" in output, output
        assert lock.read_bytes() == held
    finally:
        stop.touch()
        thread.join(300)
    code, output = holder["first"]
    assert code == 0, output
    assert not lock.exists(), "the run that took the lock must release it"


def test_a_failing_run_releases_its_lock(tmp_path: Path) -> None:
    lock = tmp_path / "pair.lock"
    seen = tmp_path / "seen"
    body = [
        {"ansible.builtin.copy": {"src": str(lock), "dest": str(seen), "mode": "0644"}},
        {"name": "Fail the roll", "ansible.builtin.fail": {"msg": "GATE FAILED"}},
    ]
    code, output = run(tmp_path / "run", lock_play(lock, body=body))
    assert code != 0 and "GATE FAILED" in output, output
    assert fields(seen)["controller"] == HOST, "the lock was not held under the failing task"
    assert not lock.exists(), "a failing run must not leave its lock behind"


@pytest.mark.parametrize("controller", [HOST, "controller-elsewhere"])
def test_a_stale_lock_refuses_until_broken_with_the_flag(tmp_path: Path, controller: str) -> None:
    lock = tmp_path / "pair.lock"
    stale_lock(lock, controller)
    held = lock.read_bytes()
    pid = fields(lock)["pid"]

    code, output = run(tmp_path / "refused", lock_play(lock))
    assert code != 0, output
    assert f"/srv/dualspark/playbooks/update.yml run by alice@{controller} (pid {pid}" in output
    assert "started 2023-11-14T22:13:20Z" in output, output
    assert "-e rolling_update_break_lock=true" in output, output
    assert lock.read_bytes() == held

    seen = tmp_path / "seen"
    body = [{"ansible.builtin.copy": {"src": str(lock), "dest": str(seen), "mode": "0644"}}]
    code, output = run(
        tmp_path / "broken", lock_play(lock, body=body), "-e", "rolling_update_break_lock=true"
    )
    assert code == 0, output
    assert "Broke the lock of pair pair_one on localhost held by /srv/dualspark/" in output
    assert ("gone" if controller == HOST else "on another controller") in output, output
    assert fields(seen)["controller"] == HOST, "the run that broke the lock must hold it"
    assert not lock.exists(), "and release it at its end"


def test_check_mode_takes_and_breaks_nothing(tmp_path: Path) -> None:
    lock = tmp_path / "pair.lock"
    code, output = run(tmp_path / "free", lock_play(lock), "--check")
    assert code == 0, output
    assert f"Would take the lock of pair pair_one on localhost ({lock})" in output, output
    assert not lock.exists()

    stale_lock(lock, "controller-elsewhere")
    held = lock.read_bytes()
    code, output = run(tmp_path / "held", lock_play(lock), "--check")
    assert code != 0, output
    assert "(check mode: a real run would refuse) Pair pair_one is locked" in output, output
    code, output = run(
        tmp_path / "break", lock_play(lock), "--check", "-e", "rolling_update_break_lock=true"
    )
    assert code == 0, output
    assert "Would break the lock of pair pair_one on localhost" in output, output
    assert lock.read_bytes() == held, "check mode must neither break nor take the lock"


def test_one_run_takes_both_nodes_or_neither(tmp_path: Path) -> None:
    """Rank 0 first: a lock held on rank 1 refuses the run, and the rank 0 lock it took goes."""
    inventory = {
        "pair_one": {
            "hosts": {
                "h0": {"spark_pair_rank": 0, "rolling_update_lock_path": str(tmp_path / "h0.lock")},
                "h1": {"spark_pair_rank": 1, "rolling_update_lock_path": str(tmp_path / "h1.lock")},
            },
            "vars": {
                "spark_pair_name": "pair_one",
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            },
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory), encoding="utf-8")
    stale_lock(tmp_path / "h1.lock", "controller-elsewhere")
    (play,) = lock_play(tmp_path / "unused")
    play.update(hosts="pair_one", any_errors_fatal=True, vars={})
    play["tasks"][0]["block"].append(
        {"ansible.builtin.debug": {"msg": "ROLLING {{ inventory_hostname }}"}}
    )
    (tmp_path / "play.yml").write_text(yaml.safe_dump([play], sort_keys=False), encoding="utf-8")
    result = run_tool("env", ROLES, "ansible-playbook", "-i", "hosts.yml", "play.yml", cwd=tmp_path)
    output = " ".join(output_of(result, 300).split())
    assert result.returncode != 0, output
    assert "Pair pair_one is locked: h1 holds" in output, output
    assert "ROLLING" not in output, output
    assert not (tmp_path / "h0.lock").exists(), "the lock taken on rank 0 must be released"
    assert "controller=controller-elsewhere" in (tmp_path / "h1.lock").read_text()


def test_unlock_leaves_another_runs_lock(tmp_path: Path) -> None:
    lock = tmp_path / "pair.lock"
    stale_lock(lock, "controller-elsewhere")
    held = lock.read_bytes()
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {"rolling_update_lock_path": str(lock)},
            "tasks": [
                {"ansible.builtin.set_fact": {"rolling_update_run": {"run": f"{HOST}:1:1"}}},
                {
                    "ansible.builtin.include_role": {
                        "name": "rolling_update",
                        "tasks_from": "unlock.yml",
                    }
                },
            ],
        }
    ]
    result = run_local_play(tmp_path, play, ROLES)
    assert result.returncode == 0, output_of(result)
    assert lock.read_bytes() == held


@pytest.fixture(scope="module")
def run_owner() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "run_owner", REPO / "roles/rolling_update/files/run_owner.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while they are made
    spec.loader.exec_module(module)
    return module


def test_run_owner_reads_the_playbook_from_the_command_line(run_owner: ModuleType) -> None:
    proc = run_owner.Process(
        1,
        0,
        [
            *("/v/bin/python3", "/v/bin/ansible-playbook", "-i", "inv/hosts.yml", "-e", "x.yml"),
            *("playbooks/update.yml", "--check"),
        ],
        0,
        "/repo",
    )
    assert run_owner.playbooks(proc) == "/repo/playbooks/update.yml"
    proc = run_owner.Process(1, 0, ["ansible-playbook", "site.yml"], 0, "")
    assert run_owner.playbooks(proc) == "site.yml"


def test_run_owner_tells_a_gone_run_from_one_elsewhere(run_owner: ModuleType) -> None:
    me = run_owner.process(os.getpid())
    assert me is not None
    # This process is no ansible-playbook, and a dead pid is no process at all.
    assert run_owner.alive(f"{HOST}:{me.pid}:{me.started}") == "gone"
    assert run_owner.alive(f"{HOST}:{dead_pid()}:{me.started}") == "gone"
    assert run_owner.alive(f"controller-elsewhere:{me.pid}:{me.started}") == "elsewhere"
    assert run_owner.alive("") == "elsewhere"
