"""A front door under test: the role's haproxy.cfg, rendered for this machine, run by the real
HAProxy binary (unprivileged, high ports on 127.0.0.1, everything in one directory) in front of
pair doubles, logging to a syslog double."""

from __future__ import annotations

import http.client
import json
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import front_door_ctl
import pytest

from tests.ansible_trust import evaluate
from tests.front_door.doubles import PairDoubleServer, SyslogDouble
from tests.front_door.render import ROLE, render, role_file, role_variables, write

CTL = ROLE / "files/front_door_ctl.py"
PAIR_KEYS = {
    "pair_one": "pairkey-one-" + "1" * 20,
    "pair_two": "pairkey-two-" + "2" * 20,
    "pair_three": "pairkey-three-" + "3" * 20,
}
CLIENT_KEYS = {
    name: f"client-{name}-" + "k" * 24
    for name in (
        *("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"),
        "gatekeeper",
    )
}
# Short checks, so that a pair leaves and comes back in well under a second.
CHECK_INTERVAL_MS = 200
CHECK_FALL = 2
CHECK_RISE = 2
RATE_LIMIT = 100
RATE_PERIOD_S = 5
MAX_REQUEST_BYTES = 65536


def haproxy_binary() -> str:
    """The real HAProxy; its absence fails the tests (bin/setup installs it)."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if not found:
        pytest.fail(
            "haproxy not found: the front_door tests run the real HAProxy; bin/setup installs "
            "the Debian package haproxy"
        )
    return found


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(done: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until `done` held; fails the test after `timeout`."""
    start = time.monotonic()
    while not done():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)
    return time.monotonic() - start


def make_certificate(directory: Path, names: list[str]) -> tuple[Path, Path]:
    """A certificate made by the role's own openssl command (tasks/tls.yml)."""
    (task,) = [
        t for t in role_file("tasks/tls.yml") if "openssl" in str(t.get("ansible.builtin.command"))
    ]
    variables = role_variables(
        {
            "front_door_tls_names": names,
            "front_door_tls_dir": str(directory),
            "front_door_tls_days": 30,
            **task["vars"],
        }
    )
    argv = [str(arg) for arg in evaluate(task["ansible.builtin.command"]["argv"], variables)]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)
    return directory / "front_door.pem", directory / "front_door.pem.key"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def door_variables(directory: Path, pairs: list[PairDoubleServer], **more: Any) -> dict[str, Any]:
    """The role's variables for a front door in `directory` in front of `pairs`."""
    return role_variables(
        {
            "ansible_managed": "Ansible managed",
            "inventory_hostname": "door.test",
            "front_door_pairs": [
                {"name": p.name, "address": "127.0.0.1", "port": p.port} for p in pairs
            ],
            "front_door_pair_api_keys": {p.name: p.key for p in pairs},
            "front_door_api_keys": [{"name": n, "key": k} for n, k in CLIENT_KEYS.items()],
            "front_door_bind": "127.0.0.1",
            "front_door_port": free_port(),
            "front_door_gate_port": free_port(),
            "front_door_metrics_bind": "127.0.0.1",
            "front_door_metrics_port": free_port(),
            "front_door_check_interval_ms": CHECK_INTERVAL_MS,
            "front_door_check_timeout_ms": 300,
            "front_door_check_fall": CHECK_FALL,
            "front_door_check_rise": CHECK_RISE,
            "front_door_rate_limit_per_key": RATE_LIMIT,
            "front_door_rate_limit_period_s": RATE_PERIOD_S,
            "front_door_max_request_bytes": MAX_REQUEST_BYTES,
            "front_door_bufsize": 16384,
            "front_door_timeout_server_s": 30,
            "front_door_tls_dir": str(directory),
            "front_door_keys_map": str(directory / "keys.map"),
            "front_door_pair_keys_map": str(directory / "pair_keys.map"),
            "front_door_stats_socket": str(directory / "admin.sock"),
            "front_door_state_file": str(directory / "server.state"),
            "front_door_log_address": str(directory / "log.sock"),
            "front_door_chroot": "",
            "front_door_pair_socket_dir": str(directory / "pairs"),
            "front_door_user": "",
            **more,
        }
    )


@dataclass
class FrontDoorUnderTest:
    directory: Path
    pairs: dict[str, PairDoubleServer]
    variables: dict[str, Any]
    log: SyslogDouble
    certificate: Path
    master_worker: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def config(self) -> Path:
        return self.directory / "haproxy.cfg"

    @property
    def socket(self) -> str:
        return str(self.variables["front_door_stats_socket"])

    def write_config(self, **changes: Any) -> str:
        self.variables.update(changes)
        (self.directory / "pairs").mkdir(exist_ok=True)
        write(self.directory, "keys.map", render("front_door_keys.map.j2", self.variables))
        write(
            self.directory, "pair_keys.map", render("front_door_pair_keys.map.j2", self.variables)
        )
        text = render("haproxy.cfg.j2", self.variables)
        write(self.directory, "haproxy.cfg", text)
        return text

    def start(self) -> None:
        self.write_config()
        mode = ["-W", "-S", str(self.directory / "master.sock")] if self.master_worker else ["-db"]
        self.process = subprocess.Popen(
            [haproxy_binary(), *mode, "-f", str(self.config)],
            stdout=(self.directory / "haproxy.out").open("wb"),
            stderr=subprocess.STDOUT,
        )
        wait_until(lambda: Path(self.socket).exists() or self.process.poll() is not None, 10, "up")
        if self.process.poll() is not None:
            raise AssertionError((self.directory / "haproxy.out").read_text())
        self.wait_all_up()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)

    def ctl(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(CTL), "--socket", self.socket, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def states(self) -> dict[str, front_door_ctl.PairState]:
        """What front_door_ctl.py reads (in this process: the command line has tests of its own)."""
        return front_door_ctl.FrontDoor(self.socket).states()

    def wait_all_up(self, timeout: float = 10) -> None:
        wait_until(
            lambda: all(s.status == "UP" for s in self.states().values()),
            timeout,
            "every pair UP",
        )

    def heal(self) -> None:
        """Every pair healthy, out of maintenance and UP: what each test starts from."""
        for double in self.pairs.values():
            double.heal()
        door = front_door_ctl.FrontDoor(self.socket)
        for name, state in door.states().items():
            if state.status == "MAINT":
                door.set_state(name, "ready")
        self.wait_all_up()

    def _tls(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.certificate))

    def request(
        self,
        path: str = "/v1/completions",
        *,
        key: str | None = CLIENT_KEYS["alice"],
        body: dict[str, Any] | bytes | None = None,
        headers: dict[str, str] | None = None,
        method: str | None = None,
        port: int | None = None,
        plain: bool = False,
        host: str = "127.0.0.1",
        timeout: float = 20,
    ) -> Answer:
        """One request to the TLS listener (or, `plain`, to a plain one such as the gate)."""
        port = port or int(self.variables["front_door_port"])
        conn: http.client.HTTPConnection = (
            http.client.HTTPConnection(host, port, timeout=timeout)
            if plain
            else http.client.HTTPSConnection(host, port, timeout=timeout, context=self._tls())
        )
        all_headers = dict(headers or {})
        if key is not None:
            all_headers["Authorization"] = f"Bearer {key}"
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        if data is not None:
            all_headers.setdefault("Content-Type", "application/json")
        try:
            conn.request(method or ("POST" if data is not None else "GET"), path, data, all_headers)
            response = conn.getresponse()
            return Answer(
                response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
            )
        finally:
            conn.close()

    def declared(self, length: int | None, sent: bytes = b"{") -> Answer:
        """A POST that declares `length` bytes of body (None: chunked) and sends only `sent`, then
        reads the answer: as a client that waits for 100-continue, or reads while it sends, sees
        a refusal that comes before its body."""
        framing = (
            f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
        )
        head = (
            f"POST /v1/completions HTTP/1.1\r\nHost: door.test\r\n"
            f"Authorization: Bearer {CLIENT_KEYS['alice']}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n\r\n"
        ).encode()
        port = int(self.variables["front_door_port"])
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with self._tls().wrap_socket(raw, server_hostname="door.test") as tls:
            tls.sendall(head + sent)
            response = http.client.HTTPResponse(tls)  # type: ignore[arg-type]
            response.begin()
            return Answer(
                response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
            )

    def complete(self, **body: Any) -> Answer:
        """A completion; `key`, `headers` and `timeout` are the request's, the rest its body."""
        key = body.pop("key", CLIENT_KEYS["alice"])
        headers = body.pop("headers", None)
        timeout = body.pop("timeout", 20)
        return self.request(
            body={"model": "m", "prompt": "hi", **body}, key=key, headers=headers, timeout=timeout
        )

    def gate(self, pair: str | None, **kwargs: Any) -> Answer:
        headers = {"X-Dualspark-Pair": pair} if pair is not None else {}
        kwargs.setdefault("key", CLIENT_KEYS["gatekeeper"])
        kwargs.setdefault("body", {"model": "m", "prompt": "hi"})
        return self.request(
            headers=headers, plain=True, port=int(self.variables["front_door_gate_port"]), **kwargs
        )


@contextmanager
def front_door(
    directory: Path, names: tuple[str, ...], **more: Any
) -> Iterator[FrontDoorUnderTest]:
    """A front door in `directory` before pair doubles named `names`, stopped afterwards."""
    haproxy_binary()
    doubles = {name: PairDoubleServer(name, PAIR_KEYS[name]) for name in names}
    log = SyslogDouble(directory / "log.sock")
    certificate, _ = make_certificate(directory, ["door.test", "127.0.0.1"])
    master_worker = bool(more.pop("master_worker", False))
    door = FrontDoorUnderTest(
        directory,
        doubles,
        door_variables(directory, list(doubles.values()), **more),
        log,
        certificate,
        master_worker,
    )
    try:
        door.start()
        yield door
    finally:
        door.stop()
        for double in doubles.values():
            double.stop()
        log.close()
