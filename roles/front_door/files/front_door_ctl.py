#!/usr/bin/env python3
"""Drain, restore and inspect the pairs behind the front door, through HAProxy's runtime API.

Installed on the front-door host by the front_door role; standard library only. It speaks to the
admin stats socket and knows the names the role's haproxy.cfg gives: the client-facing backend
`pairs` holds one server per pair (its state decides whether clients reach the pair), and each
pair's own section `pair-<name>` holds the server that carries the health checks (the gate
listener uses it, and the client-facing server tracks it).

    front_door_ctl.py status                        every pair's state as JSON
    front_door_ctl.py drain PAIR --timeout S        no new requests; wait for those in flight
    front_door_ctl.py restore PAIR --timeout S      take requests again once the checks pass
    front_door_ctl.py wait-up PAIR --timeout S      wait for the pair's checks, drained or not
    front_door_ctl.py save-state FILE               keep servers' states across a reload
    front_door_ctl.py probe ...                     a key's and a refused key's answer over TLS
"""

from __future__ import annotations

import argparse
import csv
import http.client
import io
import json
import os
import secrets
import socket
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

CLIENT_BACKEND = "pairs"
PAIR_SECTION_PREFIX = "pair-"
DEFAULT_SOCKET = "/run/haproxy/admin.sock"


class CtlError(Exception):
    """A failure the command reports on one line and exits non-zero for."""


@dataclass(frozen=True)
class PairState:
    """One pair as HAProxy sees it: `status` is the client-facing server's (MAINT while drained),
    `health` that of the server carrying the checks."""

    name: str
    status: str
    sessions: int
    queued: int
    health: str
    check_status: str
    check_code: str
    last_check: str
    pair_sessions: int

    @property
    def in_flight(self) -> int:
        return self.sessions + self.queued

    def check_summary(self) -> str:
        parts = [self.health or "unknown"]
        if self.check_status:
            parts.append(f"last check {self.check_status}")
        if self.check_code:
            parts.append(f"code {self.check_code}")
        summary = ", ".join(parts)
        return f"{summary} ({self.last_check})" if self.last_check else summary


def runtime_command(socket_path: str, command: str, timeout: float = 5.0) -> str:
    """Send one command to the runtime API (non-interactive: one command per connection)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(socket_path)
            conn.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
    except OSError as error:
        raise CtlError(f"cannot reach HAProxy's runtime API at {socket_path}: {error}") from error
    return b"".join(chunks).decode(errors="replace")


def parse_stat(text: str) -> list[dict[str, str]]:
    """Rows of `show stat` (CSV whose header line starts with '# ')."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("# "):
        raise CtlError(f"unexpected answer to 'show stat': {text[:200]!r}")
    reader = csv.DictReader(io.StringIO("\n".join([lines[0][2:], *lines[1:]])))
    return [dict(row) for row in reader if row.get("pxname")]


def _count(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 0


def pair_states(rows: Sequence[dict[str, str]]) -> dict[str, PairState]:
    """Each pair of the client-facing backend joined with its own section's checked server."""
    servers = {(row["pxname"], row["svname"]): row for row in rows}
    states = {}
    for (backend, name), row in servers.items():
        if backend != CLIENT_BACKEND or name in ("FRONTEND", "BACKEND"):
            continue
        checked = servers.get((PAIR_SECTION_PREFIX + name, name), {})
        states[name] = PairState(
            name=name,
            status=row.get("status", ""),
            sessions=_count(row.get("scur")),
            queued=_count(row.get("qcur")),
            health=checked.get("status", ""),
            # "* " marks a check in progress; the status is still the last one's.
            check_status=checked.get("check_status", "").removeprefix("* "),
            check_code=checked.get("check_code", ""),
            last_check=checked.get("last_chk", ""),
            pair_sessions=_count(checked.get("scur")),
        )
    return dict(sorted(states.items()))


class FrontDoor:
    """The runtime API of one HAProxy, with the pair names of the role's configuration."""

    def __init__(
        self,
        socket_path: str,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.socket_path = socket_path
        self.clock = clock
        self.sleep = sleep

    def states(self) -> dict[str, PairState]:
        return pair_states(parse_stat(runtime_command(self.socket_path, "show stat")))

    def state(self, pair: str) -> PairState:
        states = self.states()
        if pair not in states:
            known = ", ".join(states) or "none"
            raise CtlError(f"no pair {pair!r} at the front door (pairs: {known})")
        return states[pair]

    def set_state(self, pair: str, state: str) -> None:
        self.state(pair)
        answer = runtime_command(
            self.socket_path, f"set server {CLIENT_BACKEND}/{pair} state {state}"
        )
        if answer.strip():
            raise CtlError(f"HAProxy refused to set {pair} {state}: {answer.strip()}")

    def wait(
        self, pair: str, done: Callable[[PairState], bool], timeout: float, interval: float
    ) -> tuple[PairState, float]:
        """Poll until `done` holds or the timeout passes; (last state, seconds waited)."""
        start = self.clock()
        while True:
            state = self.state(pair)
            waited = self.clock() - start
            if done(state) or waited >= timeout:
                return state, waited
            self.sleep(min(interval, max(timeout - waited, 0.01)))


def drain(door: FrontDoor, pair: str, timeout: float, interval: float) -> str:
    """Maintenance for the client-facing server (no new request, sticky ones included: they
    hash to the other pairs), then wait until nothing is in flight there."""
    before = door.state(pair).status
    door.set_state(pair, "maint")
    state, waited = door.wait(pair, lambda s: s.in_flight == 0, timeout, interval)
    if state.in_flight:
        raise CtlError(
            f"{pair}: {state.in_flight} request(s) still in flight after {timeout:g} s "
            f"({state.sessions} running, {state.queued} queued); it stays in maintenance and "
            f"takes no new request: drain again to wait longer, or restore it"
        )
    already = " (was already in maintenance)" if before == "MAINT" else ""
    return f"{pair}: drained, no request in flight (waited {waited:.1f} s){already}"


def restore(door: FrontDoor, pair: str, timeout: float, interval: float) -> str:
    """Out of maintenance, then wait until HAProxy has it UP (its checks pass)."""
    before = door.state(pair).status
    door.set_state(pair, "ready")
    state, waited = door.wait(pair, lambda s: s.status == "UP", timeout, interval)
    if state.status != "UP":
        raise CtlError(
            f"{pair}: not UP after {timeout:g} s (client-facing {state.status}; its checks: "
            f"{state.check_summary()}); it takes requests as soon as its checks pass"
        )
    already = " (was already taking requests)" if before == "UP" else ""
    return f"{pair}: UP and taking requests (waited {waited:.1f} s){already}"


def wait_up(door: FrontDoor, pair: str, timeout: float, interval: float) -> str:
    state, waited = door.wait(pair, lambda s: s.health == "UP", timeout, interval)
    if state.health != "UP":
        raise CtlError(f"{pair}: checks not passing after {timeout:g} s: {state.check_summary()}")
    return f"{pair}: checks pass (waited {waited:.1f} s; client-facing {state.status})"


def save_state(door: FrontDoor, path: Path) -> str:
    """Write `show servers state` where server-state-file points, so that the process a reload
    starts keeps a drained pair drained and a down one down; written whole, then renamed."""
    text = runtime_command(door.socket_path, "show servers state")
    if not text.startswith("1\n"):
        raise CtlError(f"unexpected answer to 'show servers state': {text[:200]!r}")
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)
    servers = [line for line in text.splitlines()[1:] if line and not line.startswith("#")]
    return f"saved the state of {len(servers)} server(s) to {path}"


def _tls_get(
    address: str,
    port: int,
    server_name: str,
    context: ssl.SSLContext,
    path: str,
    key: str,
    timeout: float,
) -> int:
    try:
        raw = socket.create_connection((address, port), timeout=timeout)
        conn = http.client.HTTPConnection(server_name, port, timeout=timeout)
        conn.sock = context.wrap_socket(raw, server_hostname=server_name)
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        conn.close()
    except (OSError, http.client.HTTPException) as error:
        raise CtlError(f"https://{server_name}:{port}{path} via {address}: {error}") from error
    return response.status


def probe(
    address: str, port: int, server_name: str, cafile: str, path: str, key: str, timeout: float
) -> dict[str, int]:
    """GET `path` over TLS with `key`, then with a key nobody holds: the status of each. The
    certificate is checked against `server_name` (the name clients use, which this host need
    not resolve to itself)."""
    context = ssl.create_default_context(cafile=cafile or None)
    nobodys = "refused-" + secrets.token_urlsafe(24)
    return {
        "accepted": _tls_get(address, port, server_name, context, path, key, timeout),
        "refused": _tls_get(address, port, server_name, context, path, nobodys, timeout),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", default=DEFAULT_SOCKET, help="HAProxy's admin stats socket")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("status", help="every pair's state, as JSON")
    for name, default, text in (
        ("drain", 300.0, "stop new requests to PAIR and wait for those in flight"),
        ("restore", 120.0, "let PAIR take requests again and wait until it is UP"),
        ("wait-up", 120.0, "wait until PAIR's checks pass (drained or not)"),
    ):
        command = commands.add_parser(name, help=text)
        command.add_argument("pair")
        command.add_argument("--timeout", type=float, default=default, help="seconds")
        command.add_argument("--interval", type=float, default=0.5, help="seconds between polls")
    save = commands.add_parser("save-state", help="write the servers' state for a reload")
    save.add_argument("path", type=Path)
    check = commands.add_parser(
        "probe", help="GET through the TLS listener with a key and with a refused one; JSON"
    )
    check.add_argument("--address", required=True, help="address to connect to")
    check.add_argument("--port", type=int, required=True)
    check.add_argument("--server-name", required=True, help="name the certificate must carry")
    check.add_argument("--cafile", default="", help="CA to trust ('' = the system's)")
    check.add_argument("--path", default="/v1/models")
    check.add_argument(
        "--key-env", default="", help="environment variable holding the API key ('' = none)"
    )
    check.add_argument("--timeout", type=float, default=10.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    door = FrontDoor(args.socket)
    try:
        if args.command == "status":
            states = [asdict(state) for state in door.states().values()]
            print(json.dumps({"pairs": states}, indent=2))
        elif args.command == "save-state":
            print(save_state(door, args.path))
        elif args.command == "probe":
            key = os.environ.get(args.key_env, "") if args.key_env else ""
            answer = probe(
                args.address,
                args.port,
                args.server_name,
                args.cafile,
                args.path,
                key,
                args.timeout,
            )
            print(json.dumps(answer))
        else:
            action = {"drain": drain, "restore": restore, "wait-up": wait_up}[args.command]
            print(action(door, args.pair, args.timeout, args.interval))
    except CtlError as error:
        print(f"front_door_ctl {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
