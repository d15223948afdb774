"""The OpenAI-compatible HTTP surface of rank 0, with vLLM's SIGTERM behaviour.

vLLM 0.33/0.34 (vllm/entrypoints/launchers/launcher.py, serve_http): on SIGTERM the HTTP server
keeps serving while the engine shuts down with --shutdown-timeout T. T = 0 (the default) aborts
the engine's requests at once: a request in flight never gets its completion. T > 0 drains: the
engine finishes what it has for up to T seconds, answers every new completion at once as
aborted (HTTP 200, finish_reason "abort", no text), and is killed at T with whatever is left;
/health stays 200 until the engine is gone. The HTTP server closes after that. ApiState holds
that lifecycle (running, draining, stopped); a request that is still running when the engine
stops is lost: its connection is closed without an answer.

As vLLM's engine, it runs at most --max-num-seqs requests at once; the rest wait for a slot.
/metrics serves vLLM's Prometheus metrics of what it served (metrics.py). With --api-key, only
paths under vLLM's GUARDED_PREFIX need the key (vllm/entrypoints/serve/middleware/
authenticate.py): /metrics, /health and the stand-in's own report are open, as in vLLM.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from vllm_standin import metrics, model

logger = logging.getLogger("vllm.entrypoints.openai.api_server")
# The paths vLLM's AuthenticationMiddleware asks the API key for; every other path is open.
GUARDED_PREFIX = ("/v1", "/v2", "/inference", "/cohere")


class ApiState:
    """What the handlers share: config, the pair's plugin reports, in-flight accounting."""

    def __init__(
        self,
        *,
        served_model: str,
        model_path: str,
        max_model_len: int | None,
        api_keys: tuple[str, ...],
        completion: str,
        completion_delay_s: float,
        ask_rank1: Callable[[str, model.Work], dict[str, Any]],
        plugin_reports: dict[str, list[dict[str, str]]],
        max_num_seqs: int,
        kv_cache_tokens: int,
    ) -> None:
        self.served_model = served_model
        self.model_path = model_path
        self.max_model_len = max_model_len
        self.api_keys = api_keys  # any of them, as vLLM's --api-key (nargs +)
        self.completion = completion
        self.completion_delay_s = completion_delay_s
        self.ask_rank1 = ask_rank1
        self.plugin_reports = plugin_reports
        self.draining = False  # SIGTERM with --shutdown-timeout > 0: new work is aborted
        self.stopped = threading.Event()  # the engine is gone: running requests are lost
        self.in_flight = 0
        self.idle = threading.Condition()
        self.started = int(time.time())
        self.max_num_seqs = max_num_seqs
        self.running = 0  # requests holding one of the engine's max_num_seqs slots
        self.metrics = metrics.Metrics(
            served_model, max_model_len=max_model_len, kv_cache_tokens=kv_cache_tokens
        )

    def admit(self) -> bool:
        with self.idle:
            if self.draining or self.stopped.is_set():
                return False
            self.in_flight += 1
            return True

    def release(self) -> None:
        with self.idle:
            self.in_flight -= 1
            self.idle.notify_all()

    def take_slot(self) -> None:
        """Wait for one of the engine's sequence slots; RequestAbortedError once it stops."""
        with self.idle:
            self.idle.wait_for(lambda: self.running < self.max_num_seqs or self.stopped.is_set())
            if self.stopped.is_set():
                raise RequestAbortedError
            self.running += 1

    def free_slot(self) -> None:
        with self.idle:
            self.running -= 1
            self.idle.notify_all()

    def check_running(self) -> None:
        """Raise RequestAbortedError once the engine has stopped (call between generation steps)."""
        if self.stopped.is_set():
            raise RequestAbortedError

    def generate_for(self, seconds: float) -> None:
        """Simulated generation time, cut short (RequestAbortedError) when the engine stops."""
        if self.stopped.wait(seconds):
            raise RequestAbortedError

    def shut_down(self, timeout_s: int) -> int:
        """vLLM's engine shutdown: abort (0) or drain for up to timeout_s; return requests lost."""
        with self.idle:
            self.draining = True
            if timeout_s > 0:
                self.idle.wait_for(lambda: self.in_flight == 0, timeout=timeout_s)
            lost = self.in_flight
            self.stopped.set()
            self.idle.notify_all()  # requests waiting for a slot are lost with the engine
            return lost


class RequestAbortedError(Exception):
    """The engine stopped while this request was running: vLLM never completes it."""


def make_handler(state: ApiState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 5  # an idle keep-alive connection must not hold up the shutdown

        def log_message(self, format: str, *args: Any) -> None:
            logger.info("%s - %s", self.address_string(), format % args)

        def reply(self, status: int, body: dict[str, Any] | None = None) -> None:
            data = json.dumps(body).encode() if body is not None else b""
            self.send(status, data, "application/json")

        def send(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self) -> bool:
            """vLLM's AuthenticationMiddleware: a bearer token for the guarded paths only."""
            if not state.api_keys or not self.path.startswith(GUARDED_PREFIX):
                return True
            scheme, _, token = self.headers.get("Authorization", "").partition(" ")
            if scheme.lower() == "bearer" and token in state.api_keys:
                return True
            self.reply(401, {"error": "Unauthorized"})
            return False

        def do_GET(self) -> None:
            if not self.authorised():
                return
            if self.path == "/health":
                # vLLM: 503 only once the engine is dead; draining is still healthy.
                self.reply(503 if state.stopped.is_set() else 200)
            elif self.path == "/metrics":
                text = state.metrics.exposition().encode()
                self.send(200, text, metrics.CONTENT_TYPE)
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
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            if not state.admit():
                self.reply(*not_admitted(state, request))
                return
            try:
                status, body = complete(state, request)
                state.check_running()
                self.reply(status, body)
            except RequestAbortedError:
                self.close_connection = True  # no answer: the client sees the connection close
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


def check_request(state: ApiState, request: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The serving layer's checks, made before a request reaches the engine; None when fine."""
    if request.get("model") != state.served_model:
        return 404, {"error": f"The model `{request.get('model')}` does not exist."}
    prompt = request.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        return 400, {"error": "prompt must be a non-empty string"}
    return None


def not_admitted(state: ApiState, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A completion that arrives after SIGTERM, as vLLM answers it."""
    refused = check_request(state, request)
    if refused:
        return refused
    if state.stopped.is_set():  # AsyncLLM.add_request: EngineDeadError -> HTTP 500
        message = "The server had an error while processing your request."
        return 500, {"error": {"message": message, "type": "InternalServerError", "code": 500}}
    # Draining: EngineCore._reject_add_in_shutdown finishes it at once as aborted.
    prompt_tokens = len(request["prompt"].split())
    state.metrics.aborted_at_admission(prompt_tokens)
    return 200, {
        "id": "cmpl-" + hashlib.sha256(request["prompt"].encode()).hexdigest()[:16],
        "object": "text_completion",
        "created": int(time.time()),
        "model": state.served_model,
        "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "abort"}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": 0,
            "total_tokens": prompt_tokens,
        },
    }


def complete(state: ApiState, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    refused = check_request(state, request)
    if refused:
        return refused
    prompt: str = request["prompt"]
    try:
        work = model.Work.of_request(prompt, request)  # the stand-in model's steps (model.py)
    except ValueError as exc:
        return 400, {"error": str(exc)}
    tracked = state.metrics.arrive(work.tokens)
    try:
        state.take_slot()  # raises if the engine stops meanwhile
        try:
            tracked.run()
            # Every step of a TP2 model needs both ranks: ask rank 1 for its shard of the work.
            try:
                shard = state.ask_rank1(prompt, work)
            except Exception as exc:
                return 500, {"error": f"tensor-parallel peer failed: {exc}"}
            model.run(work)  # rank 0's share, through the overlay's op when its plugin registered
            tracked.first_token()
            state.generate_for(state.completion_delay_s)  # raises if the engine stops meanwhile
            tracked.finish(len(state.completion.split()), "length")
            return 200, completion(state, prompt, shard)
        finally:
            state.free_slot()
    finally:
        tracked.close()  # a request that did not finish leaves the engine's counts as they were


def completion(state: ApiState, prompt: str, shard: dict[str, Any]) -> dict[str, Any]:
    prompt_tokens = len(prompt.split())
    text = state.completion
    return {
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
    sent their requests. Taking them first (the engine is gone: they get vLLM's 500) leaves that
    window at microseconds instead of the serve loop's poll interval.
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
