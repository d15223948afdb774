"""Test doubles for what a CI machine lacks: the pairs' vLLM APIs and the host's syslog."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Seen:
    """A completion request as the pair double received it."""

    authorization: str
    body: dict[str, Any]
    headers: dict[str, str]  # names in lower case


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    double: PairDoubleServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # HAProxy's checks close with a reset, and a killed double's handlers find their
        # connections gone: neither is a failure of the double.
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.server.double.connections.add(self.connection)

    def finish(self) -> None:
        self.server.double.connections.discard(self.connection)
        super().finish()

    def _send(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _authorized(self) -> bool:
        """vLLM with --api-key: every /v1 route wants exactly `Bearer <key>`."""
        if self.headers.get("Authorization") == f"Bearer {self.server.double.key}":
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def version_string(self) -> str:
        # An upstream that names its own address, as some servers do: the front door must not
        # pass it on.
        return f"uvicorn (pair double at {self.server.double.address})"

    def do_GET(self) -> None:
        double = self.server.double
        if self.path == "/health":
            double.block_while_hung()
            self._send(double.health_status, {})
        elif self.path == "/v1/models":
            if self._authorized():
                double.block_while_hung()
                self._send(double.models_status, {"object": "list", "data": [{"id": "m"}]})
        elif self.path == "/v1/models/":
            # An absolute redirect to the double's own address, as Starlette makes for a
            # trailing slash.
            self._send(307, {}, {"Location": f"http://{double.address}/v1/models"})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        double = self.server.double
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if not self._authorized():
            return
        body = json.loads(raw or b"{}")
        seen = Seen(
            self.headers.get("Authorization", ""),
            body,
            {name.lower(): value for name, value in self.headers.items()},
        )
        with double.lock:
            double.seen.append(seen)
            double.in_flight += 1
        try:
            double.block_while_hung()
            time.sleep(float(body.get("delay", double.delay)))
            if double.killed.is_set():
                return
            self._send(
                200,
                {
                    "object": "text_completion",
                    "model": body.get("model", "m"),
                    "pair": double.name,
                    "choices": [{"index": 0, "text": " 4", "finish_reason": "length"}],
                },
            )
        finally:
            with double.lock:
                double.in_flight -= 1


class PairDoubleServer:
    """Stands in for one pair's rank-0 vLLM API on 127.0.0.1: /health without a key, /v1/models
    and /v1/completions with exactly its key (401 otherwise, as vLLM). It records every
    completion it takes (the Authorization it got, the body) and can be made to fail its
    checks, to hang (accept and never answer), or be killed with requests in flight."""

    def __init__(self, name: str, key: str) -> None:
        self.name = name
        self.key = key
        self.lock = threading.Lock()
        self.seen: list[Seen] = []
        self.in_flight = 0
        self.delay = 0.0
        self.health_status = 200
        self.models_status = 200
        self.connections: set[socket.socket] = set()
        self.killed = threading.Event()
        self._released = threading.Event()
        self._released.set()
        self._server: _Server | None = None
        self.port = 0
        self.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.killed.clear()
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.double = self
        self.port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def kill(self) -> None:
        """As a crashed server: no more listening, every open connection reset."""
        self.killed.set()
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        for conn in list(self.connections):
            try:
                conn.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def hang(self) -> None:
        """Still accepting connections, answering nothing (a wedged engine)."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()

    def block_while_hung(self) -> None:
        self._released.wait(timeout=60)

    def heal(self) -> None:
        self.release()
        self.health_status = 200
        self.models_status = 200
        self.delay = 0.0
        if self.killed.is_set():
            self.start()

    def completions(self) -> list[Seen]:
        with self.lock:
            return list(self.seen)

    def stop(self) -> None:
        self.release()
        if self._server is not None and not self.killed.is_set():
            self._server.shutdown()
            self._server.server_close()


class SyslogDouble:
    """Stands in for journald's /dev/log: a datagram socket that keeps every line HAProxy logs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(str(path))
        self._lines: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        while True:
            try:
                data = self._socket.recv(65536)
            except OSError:
                return
            with self._lock:
                self._lines.append(data.decode(errors="replace").rstrip("\n"))

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def wait_for(self, found: Callable[[str], bool], timeout: float = 5.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines():
                if found(line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no such log line in {timeout} s; last lines: {self.lines()[-5:]}")

    def close(self) -> None:
        self._socket.close()
