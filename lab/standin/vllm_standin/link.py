"""The rendezvous between rank 0 and rank 1: one TCP connection carrying JSON lines.

It stands in for torch.distributed's TCP store plus the NCCL communicator: rank 0 listens on
--master-port, rank 1 connects to --master-addr within the rendezvous timeout, and from then on
each rank treats a closed connection or a silent peer as fatal, as a TP group does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("vllm.distributed")
HEARTBEAT_INTERVAL_S = 1.0


class RendezvousError(RuntimeError):
    """The peer never came, disagreed about the group, or was lost."""


class Link:
    """One end of the connection; thread-safe sends, one reader thread."""

    def __init__(self, sock: socket.socket, peer_rank: int) -> None:
        self.sock = sock
        self.peer_rank = peer_rank
        self._reader = sock.makefile("r", encoding="utf-8")
        self._send_lock = threading.Lock()
        self._replies: dict[int, dict[str, Any]] = {}
        self._replies_ready = threading.Condition()
        self._next_id = 0
        self.last_seen = time.monotonic()
        self.closing = False

    def send(self, message: dict[str, Any]) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self._send_lock:
            self.sock.sendall(data)

    def receive(self) -> dict[str, Any] | None:
        line = self._reader.readline()
        if not line:
            return None
        self.last_seen = time.monotonic()
        message: dict[str, Any] = json.loads(line)
        return message

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send a message carrying a fresh id and wait for the reply with that id."""
        with self._replies_ready:
            self._next_id += 1
            message_id = self._next_id
        self.send({**message, "id": message_id})
        deadline = time.monotonic() + timeout_s
        with self._replies_ready:
            while message_id not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RendezvousError(f"rank {self.peer_rank} did not answer in {timeout_s} s")
                self._replies_ready.wait(left)
            return self._replies.pop(message_id)

    def deliver_reply(self, message: dict[str, Any]) -> None:
        with self._replies_ready:
            self._replies[int(message["id"])] = message
            self._replies_ready.notify_all()

    def start_heartbeat(self, on_lost: Callable[[str], None]) -> None:
        def beat() -> None:
            while not self.closing:
                try:
                    self.send({"type": "beat"})
                except OSError as exc:
                    if not self.closing:
                        on_lost(f"sending to rank {self.peer_rank} failed: {exc}")
                    return
                time.sleep(HEARTBEAT_INTERVAL_S)

        threading.Thread(target=beat, name="heartbeat", daemon=True).start()

    def watch_silence(self, timeout_s: float, on_lost: Callable[[str], None]) -> None:
        def watch() -> None:
            while not self.closing:
                silent = time.monotonic() - self.last_seen
                if silent > timeout_s:
                    on_lost(f"no heartbeat from rank {self.peer_rank} for {silent:.1f} s")
                    return
                time.sleep(HEARTBEAT_INTERVAL_S / 2)

        threading.Thread(target=watch, name="watchdog", daemon=True).start()

    def close(self) -> None:
        self.closing = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


def accept_peer(host: str, port: int, timeout_s: float) -> Link:
    """Rank 0: listen on the master port until rank 1 connects."""
    server = socket.create_server((host, port), reuse_port=False)
    server.settimeout(timeout_s)
    logger.info("rank 0 waiting for rank 1 on %s:%d (timeout %.0f s)", host, port, timeout_s)
    try:
        sock, address = server.accept()
    except TimeoutError as exc:
        raise RendezvousError(f"rank 1 did not join {host}:{port} within {timeout_s} s") from exc
    finally:
        server.close()
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    logger.info("rank 1 joined from %s:%d", *address[:2])
    return Link(sock, peer_rank=1)


def connect_to_master(address: str, port: int, timeout_s: float) -> Link:
    """Rank 1: connect to rank 0's master port, retrying until the rendezvous timeout."""
    deadline = time.monotonic() + timeout_s
    logger.info("rank 1 connecting to rank 0 at %s:%d (timeout %.0f s)", address, port, timeout_s)
    while True:
        try:
            sock = socket.create_connection((address, port), timeout=5)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise RendezvousError(
                    f"rank 0 at {address}:{port} not reachable within {timeout_s} s: {exc}"
                ) from exc
            time.sleep(0.5)
            continue
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        logger.info("connected to rank 0 at %s:%d", address, port)
        return Link(sock, peer_rank=0)
