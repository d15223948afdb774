"""The request-stream client against a local HTTP server that answers, refuses, drains or drops."""

from __future__ import annotations

import json
import select
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.update.request_stream import (
    ANSWERED,
    FAILED,
    REFUSED,
    CompletionCall,
    RequestStream,
    StreamLimits,
    TargetNotAllowedError,
    completion_call,
    main,
    send_one,
)


class ServiceDouble(ThreadingHTTPServer):
    """Stand-in for the API server: behaviour is switched by `mode`, answers take `delay_s`.

    `drain()` does what a graceful shutdown does: the serving thread closes the listener (new
    connections are refused from then on) and the requests in flight are finished.
    """

    daemon_threads = False
    block_on_close = True  # server_close() waits for the requests in flight

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), CompletionHandler)
        self.mode = "answer"
        self.delay_s = 0.0
        self.sessions: list[str] = []
        self.draining = threading.Event()
        self.drained = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def serve_until_drained(self) -> None:
        # Closing the listener on the thread that polls it: no poll ever sees a closed socket.
        while not self.draining.is_set():
            ready, _, _ = select.select([self.socket], [], [], 0.02)
            if ready:
                self._handle_request_noblock()
        self.server_close()
        self.drained.set()

    def drain(self) -> None:
        self.draining.set()
        self.drained.wait(10)


class CompletionHandler(BaseHTTPRequestHandler):
    server: ServiceDouble

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))
        self.server.sessions.append(self.headers.get("X-Session-Id", ""))
        time.sleep(self.server.delay_s)
        mode = self.server.mode
        if mode == "drop":
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        if mode == "busy":
            self._send(503, {"error": "draining"})
            return
        if mode in ("stopped", "crashed"):  # vLLM's engine-dead answer, or any other 500
            message = "The server had an error while processing your request."
            error = {"message": message if mode == "stopped" else "boom", "code": 500}
            self._send(500, {"error": {**error, "type": "InternalServerError"}})
            return
        if mode in ("declined", "cut"):  # vLLM's abort: unstarted while draining, or mid-way
            tokens = 0 if mode == "declined" else 3
            choice = {"text": " Par" if tokens else "", "finish_reason": "abort"}
            usage = {"prompt_tokens": 5, "completion_tokens": tokens}
            self._send(200, {"model": request["model"], "choices": [choice], "usage": usage})
            return
        text = " Paris." if mode == "answer" else " Berlin."
        self._send(200, {"model": request["model"], "choices": [{"text": text}]})

    def _send(self, status: int, document: dict[str, object]) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def service() -> Iterator[ServiceDouble]:
    server = ServiceDouble()
    threading.Thread(target=server.serve_until_drained, daemon=True).start()
    yield server
    server.drain()


def call_for(url: str, expect: str | None = "Paris") -> CompletionCall:
    return completion_call(url, "lab-model", "The capital of France is", 4, None, expect)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_answer_is_counted_as_answered(service: ServiceDouble) -> None:
    assert send_one(call_for(service.url), 5).kind == ANSWERED


def test_closed_port_is_refused_not_failed() -> None:
    outcome = send_one(call_for(f"http://127.0.0.1:{free_port()}"), 5)
    assert outcome.kind == REFUSED, outcome


def test_draining_503_is_refused(service: ServiceDouble) -> None:
    service.mode = "busy"
    assert send_one(call_for(service.url), 5).kind == REFUSED


def test_unstarted_abort_while_draining_is_refused(service: ServiceDouble) -> None:
    service.mode = "declined"
    outcome = send_one(call_for(service.url), 5)
    assert outcome.kind == REFUSED, outcome


def test_engine_already_stopped_is_refused(service: ServiceDouble) -> None:
    service.mode = "stopped"
    assert send_one(call_for(service.url), 5).kind == REFUSED


def test_any_other_server_error_is_failed(service: ServiceDouble) -> None:
    service.mode = "crashed"
    assert send_one(call_for(service.url), 5).kind == FAILED


def test_abort_after_tokens_is_failed(service: ServiceDouble) -> None:
    service.mode = "cut"
    assert send_one(call_for(service.url), 5).kind == FAILED


def test_taken_then_dropped_is_failed(service: ServiceDouble) -> None:
    service.mode = "drop"
    outcome = send_one(call_for(service.url), 5)
    assert outcome.kind == FAILED, outcome
    assert outcome.reason.startswith("taken, then")


def test_wrong_answer_is_failed(service: ServiceDouble) -> None:
    service.mode = "wrong"
    outcome = send_one(call_for(service.url), 5)
    assert outcome.kind == FAILED
    assert "wrong answer" in outcome.reason


def test_answer_that_outlives_the_timeout_is_failed(service: ServiceDouble) -> None:
    service.delay_s = 1.0
    assert send_one(call_for(service.url), 0.2).kind == FAILED


def test_public_address_is_refused_before_any_request() -> None:
    with pytest.raises(TargetNotAllowedError):
        call_for("http://8.8.8.8:8000")


def test_stream_stops_at_the_request_limit(service: ServiceDouble) -> None:
    limits = StreamLimits(max_requests=7, max_seconds=30, request_timeout_s=5, concurrency=3)
    report = RequestStream(call_for(service.url), limits).run()
    assert (report.sent, report.answered, report.refused, report.failed) == (7, 7, 0, 0)


def test_stream_backs_off_while_refused() -> None:
    call = call_for(f"http://127.0.0.1:{free_port()}")
    limits = StreamLimits(
        max_requests=100_000, max_seconds=0.5, request_timeout_s=5, refused_pause_s=0.1
    )
    report = RequestStream(call, limits).run()
    assert report.sent == report.refused
    assert 3 <= report.sent <= 6, report


def test_stream_stops_at_the_time_limit(service: ServiceDouble) -> None:
    service.delay_s = 0.05
    limits = StreamLimits(max_requests=100_000, max_seconds=0.5, request_timeout_s=5)
    report = RequestStream(call_for(service.url), limits).run()
    assert 0 < report.sent < 100_000
    assert report.seconds < 3


def test_stream_stops_when_the_stop_file_appears(service: ServiceDouble, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    limits = StreamLimits(
        max_requests=100_000, max_seconds=30, request_timeout_s=5, pause_s=0.01, stop_file=stop
    )
    threading.Timer(0.3, stop.touch).start()
    report = RequestStream(call_for(service.url), limits).run()
    assert report.seconds < 5
    assert report.sent == report.answered > 0


def test_graceful_drain_loses_nothing_and_refuses_the_rest(service: ServiceDouble) -> None:
    """Close the listener while requests are in flight: they finish, later ones are refused."""
    service.delay_s = 0.3
    limits = StreamLimits(
        max_requests=100_000, max_seconds=2, request_timeout_s=5, pause_s=0.01, concurrency=3
    )
    stream = RequestStream(call_for(service.url), limits)

    threading.Timer(0.5, service.drain).start()
    report = stream.run()
    assert report.failed == 0, report
    assert report.answered > 0
    assert report.refused > 0
    assert report.sent == report.answered + report.refused


def test_abrupt_stop_with_requests_in_flight_is_caught(service: ServiceDouble) -> None:
    """Requests taken and then dropped by a killed server show up as failed: the check can fail."""
    service.delay_s = 0.3
    limits = StreamLimits(max_requests=100_000, max_seconds=1.5, request_timeout_s=5, concurrency=3)
    stream = RequestStream(call_for(service.url), limits)
    threading.Timer(0.5, lambda: setattr(service, "mode", "drop")).start()
    report = stream.run()
    assert report.failed > 0, report
    assert report.sent == report.answered + report.refused + report.failed


def test_command_line_writes_the_report(
    service: ServiceDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report_path = tmp_path / "report.json"
    rc = main(
        [
            "--url", service.url, "--model", "lab-model", "--expect", "Paris",
            "--max-requests", "5", "--max-seconds", "10", "--report", str(report_path),
        ]
    )  # fmt: skip
    assert rc == 0
    written = json.loads(report_path.read_text(encoding="utf-8"))
    printed = json.loads(capsys.readouterr().out)
    assert written == printed
    assert (written["sent"], written["answered"], written["failed"]) == (5, 5, 0)


def test_command_line_refuses_a_public_target(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--url", "http://8.8.8.8:8000", "--model", "m", "--max-requests", "1"])
    assert rc == 2
    assert "not a loopback or lab address" in capsys.readouterr().err


def test_each_worker_sends_its_own_session_header(service: ServiceDouble) -> None:
    call = completion_call(
        service.url, "lab-model", "Q", 4, None, "Paris", extra_headers=["X-Session-Id: s-{worker}"]
    )
    report = RequestStream(call, StreamLimits(12, 30, 5, concurrency=3)).run()
    assert report.answered == 12
    assert set(service.sessions) == {"s-0", "s-1", "s-2"}
    assert 0 < report.slowest_s < 5


def test_a_header_without_a_colon_is_refused() -> None:
    with pytest.raises(ValueError, match="give it as 'Name: value'"):
        completion_call("http://127.0.0.1:1", "m", "Q", 4, None, None, extra_headers=["X-Id"])


def test_https_needs_a_ca_and_plain_http_takes_none(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give --cacert with an https URL"):
        completion_call("https://127.0.0.1:1", "m", "Q", 4, None, None)
    with pytest.raises(ValueError, match="give --cacert with an https URL"):
        completion_call("http://127.0.0.1:1", "m", "Q", 4, None, None, cafile=tmp_path / "ca")


def self_signed(directory: Path, name: str) -> tuple[Path, Path]:
    certificate, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", f"/CN={name}", "-addext", f"subjectAltName=DNS:{name}",
         "-keyout", str(key), "-out", str(certificate)],
        check=True, capture_output=True,
    )  # fmt: skip
    return certificate, key


@pytest.fixture
def tls_service(service: ServiceDouble, tmp_path: Path) -> Iterator[tuple[ServiceDouble, Path]]:
    certificate, key = self_signed(tmp_path, "door")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certificate, key)
    plain = service.socket
    service.socket = context.wrap_socket(plain, server_side=True)
    yield service, certificate


def test_https_is_checked_for_the_name_given(tls_service: tuple[ServiceDouble, Path]) -> None:
    service, certificate = tls_service
    url = service.url.replace("http://", "https://")
    good = completion_call(url, "m", "Q", 4, None, "Paris", cafile=certificate, tls_name="door")
    assert send_one(good, 5).kind == ANSWERED
    wrong = completion_call(url, "m", "Q", 4, None, "Paris", cafile=certificate, tls_name="other")
    outcome = send_one(wrong, 5)
    assert (outcome.kind, outcome.reason.split(":")[0]) == (FAILED, "TLS")
