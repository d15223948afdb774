"""rolling_update_confirm: each pair that rolls waits for a typed "yes" on the terminal; any other
answer, or no terminal, ends the run with that pair and every later one untouched. Runs the
role's confirm.yml in a play shaped like update.yml's roll (two pairs, one batch each), under a
pseudo-terminal that answers as an operator would."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from tests.helpers import REPO

CONFIRM = REPO / "roles/rolling_update/tasks/confirm.yml"
PROMPT = b"Type yes to roll it"
TYPING_DELAY_S = 1.5
INVENTORY = {
    "dualspark": {
        "children": {
            name: {"hosts": dict.fromkeys(hosts), "vars": {"spark_pair_name": name}}
            for name, hosts in (("pair_one", ("h0", "h1")), ("pair_two", ("h2", "h3")))
        },
        "vars": {
            "ansible_connection": "local",
            "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        },
    }
}
ROLL = [
    {
        "hosts": "dualspark",
        "gather_facts": False,
        "serial": 2,
        "order": "inventory",
        "any_errors_fatal": True,
        "vars": {"rolling_update_target_release": "r2", "rolling_update_confirm": True},
        "tasks": [
            {"ansible.builtin.include_tasks": str(CONFIRM)},
            {"name": "Roll", "ansible.builtin.debug": {"msg": "ROLLED {{ spark_pair_name }}"}},
        ],
    }
]


def write_play(directory: Path) -> list[str]:
    (directory / "hosts.yml").write_text(yaml.safe_dump(INVENTORY), encoding="utf-8")
    (directory / "roll.yml").write_text(yaml.safe_dump(ROLL, sort_keys=False), encoding="utf-8")
    return [str(REPO / ".venv/bin/ansible-playbook"), "-i", "hosts.yml", "roll.yml"]


def environment() -> dict[str, str]:
    return dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", NO_COLOR="1")


def run_on_terminal(
    directory: Path, answers: Sequence[bytes], timeout_s: float = 120
) -> tuple[int, str]:
    """Run the roll with a pseudo-terminal as its controlling terminal; type the next answer
    each time the prompt shows. Returns the exit status and everything it printed."""
    argv = write_play(directory)
    pid, terminal = pty.fork()
    if pid == 0:  # the child: ansible-playbook, its terminal the pty
        os.chdir(directory)
        os.execve(argv[0], argv, environment())
    output, pending, deadline = b"", list(answers), time.monotonic() + timeout_s
    prompted_at = 0.0
    while time.monotonic() < deadline:
        ready, _, _ = select.select([terminal], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # the child closed the terminal: it has ended
                break
            if not chunk:
                break
            output += chunk
        if pending and output.count(PROMPT) > len(answers) - len(pending):
            # Ansible flushes the terminal's input when it takes it over after the prompt: type
            # once it listens, as a person would.
            prompted_at = prompted_at or time.monotonic()
            if time.monotonic() - prompted_at > TYPING_DELAY_S:
                os.write(terminal, pending.pop(0) + b"\r")
                prompted_at = 0.0
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(terminal)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace").replace("\r", "")


def test_yes_rolls_each_pair_after_its_own_question(tmp_path: Path) -> None:
    status, output = run_on_terminal(tmp_path, [b"yes", b"YES "])
    assert status == 0, output
    assert output.count(PROMPT.decode()) == 2, output
    assert "Roll pair pair_one (h0 + h1) to release r2?" in " ".join(output.split()), output
    assert '"msg": "ROLLED pair_one"' in output and '"msg": "ROLLED pair_two"' in output, output


def test_any_other_answer_leaves_the_pair_and_every_later_one_untouched(tmp_path: Path) -> None:
    status, output = run_on_terminal(tmp_path, [b"y"])
    flat = " ".join(output.split())
    assert status != 0, output
    assert 'Pair pair_one was not rolled: the roll was not confirmed (answer "y"' in flat, output
    assert "ROLLED pair" not in output, output
    assert output.count(PROMPT.decode()) == 1, output  # pair_two never asked


def test_no_terminal_is_no_confirmation(tmp_path: Path) -> None:
    result = subprocess.run(
        write_play(tmp_path),
        cwd=tmp_path,
        env=environment(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    flat = " ".join(output.split())
    assert 'Pair pair_one was not rolled: the roll was not confirmed (answer ""' in flat, output
    assert "ROLLED pair" not in output, output
