#!/usr/bin/env python3
"""Who this Ansible run is, for the pair lock (rolling_update tasks/lock_node.yml).

    run_owner.py               prints {"run", "controller", "user", "pid", "playbook", "started"}
    run_owner.py --alive RUN   prints running, gone or elsewhere for a run named by an earlier print

Runs on the controller (delegate_to: localhost) as a child of ansible-playbook: the run is the
outermost ansible-playbook process above this one (its workers are forks with the same command
line). ``run`` is ``<controller>:<pid>:<start time, epoch seconds>``, which no other process has
ever had, so a lock naming it can be told from a lock of another run and checked for liveness.
Linux /proc first; ``ps`` where there is no /proc (a macOS controller).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PROC = Path("/proc")
# ansible-playbook options whose value is a separate argument that may end in .yml.
VALUE_OPTIONS = frozenset(
    {"-i", "--inventory", "--inventory-file", "-e", "--extra-vars", "--vault-password-file"}
)


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    argv: list[str]
    started: int  # epoch seconds
    cwd: str


def _proc_process(pid: int) -> Process | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text(encoding="utf-8")
        argv = (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
        cwd = str((PROC / str(pid) / "cwd").readlink())
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    boot = next(
        int(line.split()[1])
        for line in (PROC / "stat").read_text(encoding="utf-8").splitlines()
        if line.startswith("btime ")
    )
    started = boot + int(fields[19]) // os.sysconf("SC_CLK_TCK")
    return Process(pid, int(fields[1]), [a for a in argv if a], started, cwd)


def _ps_process(pid: int) -> Process | None:
    result = subprocess.run(
        ["ps", "-o", "ppid=", "-o", "lstart=", "-o", "args=", "-p", str(pid)],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, LC_ALL="C"),
    )
    parts = result.stdout.split()
    if result.returncode != 0 or len(parts) < 7:
        return None
    started = int(time.mktime(time.strptime(" ".join(parts[1:6]), "%a %b %d %H:%M:%S %Y")))
    return Process(pid, int(parts[0]), parts[6:], started, "")


def process(pid: int) -> Process | None:
    return _proc_process(pid) if PROC.joinpath("self").exists() else _ps_process(pid)


def is_playbook(proc: Process) -> bool:
    """ansible-playbook run as a script or through its interpreter."""
    return any(Path(arg).name == "ansible-playbook" for arg in proc.argv[:2])


def playbook_run(start: int) -> Process | None:
    """The outermost ansible-playbook process among the ancestors of ``start``."""
    found, pid = None, start
    while pid > 1:
        proc = process(pid)
        if proc is None:
            break
        if is_playbook(proc):
            found = proc
        elif found is not None:
            break
        pid = proc.ppid
    return found


def playbooks(proc: Process) -> str:
    """The playbook arguments of an ansible-playbook command line, made absolute where known."""
    names, skip = [], False
    first = 1 if Path(proc.argv[0]).name == "ansible-playbook" else 2
    for arg in proc.argv[first:]:
        if skip:
            skip = False
        elif arg in VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-") and arg.endswith((".yml", ".yaml")):
            names.append(str(Path(proc.cwd, arg)) if proc.cwd else arg)
    return " ".join(names) or "unknown"


def owner() -> dict[str, object]:
    controller = socket.gethostname()
    run = playbook_run(os.getppid())
    if run is None:  # not under ansible-playbook (ansible-console, a test harness): this parent
        run = process(os.getppid()) or Process(os.getppid(), 0, [], int(time.time()), "")
        playbook = "unknown"
    else:
        playbook = playbooks(run)
    started = datetime.fromtimestamp(run.started, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "run": f"{controller}:{run.pid}:{run.started}",
        "controller": controller,
        "user": getpass.getuser(),
        "pid": run.pid,
        "playbook": playbook.replace("\n", " "),
        "started": started,
    }


def alive(run: str) -> str:
    """running: the run's ansible-playbook still runs here; gone: it does not; elsewhere: it ran
    on another controller, which this one cannot look at."""
    controller, pid, started = [*run.rsplit(":", 2), "", ""][:3]
    if controller != socket.gethostname() or not pid.isdigit():
        return "elsewhere"
    proc = process(int(pid))
    # A start time a second off is the same process seen through a rounding of ticks.
    if proc and is_playbook(proc) and started.isdigit() and abs(proc.started - int(started)) <= 1:
        return "running"
    return "gone"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alive", metavar="RUN", help="say whether the run named RUN still runs")
    args = parser.parse_args()
    print(alive(args.alive) if args.alive is not None else json.dumps(owner()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
