"""The OpenAI-compatible HTTP surface of rank 0, with vLLM's drain-on-SIGTERM behaviour."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

logger = logging.getLogger("vllm.entrypoints.openai.api_server")


class ApiState:
    """What the handlers share: config, the pair's plugin reports, in-flight accounting."""

    def __init__(
        self,
        *,
        served_model: str,
        model_path: str,
        max_model_len: int | None,
        api_key: str | None,
        completion: str,
        completion_delay_s: float,
        ask_rank1: Callable[[str], dict[str, Any]],
        plugin_reports: dict[str, list[dict[str, str]]],
    ) -> None:
        self.served_model = served_model
        self.model_path = model_path
        self.max_model_len = max_model_len
        self.api_key = api_key
        self.completion = completion
        self.completion_delay_s = completion_delay_s
        self.ask_rank1 = ask_rank1
        self.plugin_reports = plugin_reports
        self.draining = False
        self.in_flight = 0
        self.idle = threading.Condition()
        self.started = int(time.time())

    def admit(self) -> bool:
        with self.idle:
            if self.draining:
                return False
            self.in_flight += 1
            return True

    def release(self) -> None:
        with self.idle:
            self.in_flight -= 1
            self.idle.notify_all()

    def drain(self, timeout_s: float) -> int:
        """Stop admitting; wait for in-flight requests; return how many were still running."""
        with self.idle:
            self.draining = True
            self.idle.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)
            return self.in_flight


def make_handler(state: ApiState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 5  # an idle keep-alive connection must not hold up the shutdown

        def log_message(self, format: str, *args: Any) -> None:
            logger.info("%s - %s", self.address_string(), format % args)

        def reply(self, status: int, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self) -> bool:
            if state.api_key is None:
                return True
            if self.headers.get("Authorization", "") == f"Bearer {state.api_key}":
                return True
            self.reply(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            if self.path == "/health":
                self.reply(503 if state.draining else 200)
            elif not self.authorised():
                return
            elif self.path == "/v1/models":
                self.reply(200, models(state))
            elif self.path == "/standin/plugins":
                self.reply(200, {"ranks": state.plugin_reports})
            else:
                self.reply(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            if not self.authorised():
                return
            if self.path != "/v1/completions":
                self.reply(404, {"error": f"no route {self.path}"})
                return
            if not state.admit():
                self.reply(503, {"error": "server is shutting down"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                request = json.loads(self.rfile.read(length) or b"{}")
                status, body = complete(state, request)
                self.reply(status, body)
            finally:
                state.release()

    return Handler


def models(state: ApiState) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": state.served_model,
                "object": "model",
                "created": state.started,
                "owned_by": "vllm",
                "root": state.model_path,
                "max_model_len": state.max_model_len,
            }
        ],
    }


def complete(state: ApiState, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    if request.get("model") != state.served_model:
        return 404, {"error": f"The model `{request.get('model')}` does not exist."}
    prompt = request.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        return 400, {"error": "prompt must be a non-empty string"}
    # Every step of a TP2 model needs both ranks: ask rank 1 for its shard of the work.
    try:
        shard = state.ask_rank1(prompt)
    except Exception as exc:
        return 500, {"error": f"tensor-parallel peer failed: {exc}"}
    time.sleep(state.completion_delay_s)
    prompt_tokens = len(prompt.split())
    text = state.completion
    return 200, {
        "id": "cmpl-" + hashlib.sha256(prompt.encode()).hexdigest()[:16],
        "object": "text_completion",
        "created": int(time.time()),
        "model": state.served_model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": len(text.split()),
            "total_tokens": prompt_tokens + len(text.split()),
        },
        "standin": {"ranks": [0, shard["rank"]], "rank1_digest": shard["digest"]},
    }


def make_server(host: str, port: int, state: ApiState) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), make_handler(state))
    # server_close() then waits for every handler: an accepted connection is always answered.
    server.daemon_threads = False
    return server


def stop_listening(server: ThreadingHTTPServer) -> None:
    """Answer the connections still queued on the listening socket, then close it.

    Closing a listening socket resets the connections queued on it, whose clients have already
    sent their requests. Taking them first (while draining they get a 503) leaves that window at
    microseconds instead of the serve loop's poll interval.
    """
    server.socket.setblocking(False)
    while True:
        try:
            connection, address = server.socket.accept()
        except OSError:
            break
        connection.setblocking(True)
        server.process_request(connection, address)
    server.socket.close()
