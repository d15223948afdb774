#!/usr/bin/env python3
"""A bounded stream of completion requests, run against the API while the pair is updated.

Every request ends in exactly one of three counts:

* answered: HTTP 200 with a completion (and the expected text, when one is given);
* refused: the service did not take the request (connection refused, 503/429, or vLLM's answers
  to a request that reaches it during a stop: HTTP 200 finished as "abort" with no token while it
  drains, HTTP 500 "engine dead" in the moment between its engine's exit and its listener's
  close; neither ever reached a model step);
* failed: the service took the request and never answered it properly (reset, timeout, error,
  wrong answer). A rolling update must keep this at zero.

The stream stops by itself: after ``--max-requests`` requests or ``--max-seconds`` seconds,
whichever comes first, or as soon as ``--stop-file`` exists. It only talks to loopback or
private addresses (the lab's hosts), never anywhere else. An https URL is checked against
``--cacert`` (for the name ``--tls-name``, when the URL gives an address); ``--header`` adds a
header to every request, ``{worker}`` in it standing for the worker's number (one conversation
per worker, for a front door's affinity).

    request_stream.py --url http://172.17.0.3:8000 --model M --max-seconds 120 --report out.json
    request_stream.py --url https://172.17.0.9:8443 --cacert door.crt --tls-name door \
        --header 'X-Session-Id: stream-{worker}' --model M --report out.json
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import socket
import ssl
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

ANSWERED = "answered"
REFUSED = "refused"
FAILED = "failed"
# The service says "not now" without taking the request: what a draining server answers.
REFUSING_STATUSES = frozenset({429, 503})
MAX_REASON_SAMPLES = 10


class TargetNotAllowedError(ValueError):
    """The URL points somewhere other than loopback or a private (lab) address."""


@dataclass(frozen=True)
class StreamLimits:
    max_requests: int
    max_seconds: float
    request_timeout_s: float
    pause_s: float = 0.0
    refused_pause_s: float = 0.0  # back off while the service is down, as a client would
    concurrency: int = 1
    stop_file: Path | None = None


@dataclass(frozen=True)
class TlsTarget:
    """An https endpoint: its certificate is checked against cafile, for server_name."""

    cafile: Path
    server_name: str


@dataclass(frozen=True)
class CompletionCall:
    host: str
    port: int
    path: str
    body: bytes
    headers: dict[str, str]
    expect_text: str | None = None
    tls: TlsTarget | None = None

    def for_worker(self, worker: int) -> CompletionCall:
        headers = {
            name: value.replace("{worker}", str(worker)) for name, value in self.headers.items()
        }
        return replace(self, headers=headers)

    def connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.tls is None:
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout_s)
        context = ssl.create_default_context(cafile=str(self.tls.cafile))
        return _NamedTlsConnection(
            self.host, self.port, timeout=timeout_s, context=context, name=self.tls.server_name
        )


class _NamedTlsConnection(http.client.HTTPSConnection):
    """Connects to an address and checks the certificate for a name (curl's --resolve)."""

    def __init__(
        self, host: str, port: int, *, timeout: float, context: ssl.SSLContext, name: str
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._tls_context = context
        self._tls_name = name

    def connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self._tls_context.wrap_socket(raw, server_hostname=self._tls_name)


@dataclass
class StreamReport:
    sent: int = 0
    answered: int = 0
    refused: int = 0
    failed: int = 0
    seconds: float = 0.0
    # The longest any one request took, whatever its outcome: a hung request shows here.
    slowest_s: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)
    failure_samples: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass(frozen=True)
class Outcome:
    kind: str
    reason: str


def check_target(host: str) -> None:
    """Refuse any host that resolves to an address outside loopback and private ranges."""
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror as exc:
        raise TargetNotAllowedError(f"cannot resolve {host!r}: {exc}") from exc
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not (address.is_loopback or address.is_private):
            raise TargetNotAllowedError(
                f"{host} resolves to {address}, not a loopback or lab address"
            )


def parse_header(text: str) -> tuple[str, str]:
    name, colon, value = text.partition(":")
    if not colon or not name.strip() or any(c.isspace() for c in name.strip()):
        raise ValueError(f"header {text!r}: give it as 'Name: value'")
    return name.strip(), value.strip()


def completion_call(
    url: str,
    model: str,
    prompt: str,
    max_tokens: int,
    api_key: str | None,
    expect: str | None,
    *,
    cafile: Path | None = None,
    tls_name: str | None = None,
    extra_headers: Sequence[str] = (),
) -> CompletionCall:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{url!r}: only http:// or https:// host:port URLs of the lab are supported"
        )
    if (parts.scheme == "https") != (cafile is not None):
        raise ValueError(f"{url!r}: give --cacert with an https URL, and only then")
    check_target(parts.hostname)
    tls = TlsTarget(cafile, tls_name or parts.hostname) if cafile is not None else None
    headers = {"Content-Type": "application/json"}
    headers.update(parse_header(header) for header in extra_headers)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    body = json.dumps(
        {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    ).encode()
    base = parts.path.rstrip("/")
    return CompletionCall(
        host=parts.hostname,
        port=parts.port or (443 if tls else 80),
        path=f"{base}/v1/completions",
        body=body,
        headers=headers,
        expect_text=expect,
        tls=tls,
    )


def completion_text(payload: bytes) -> str | None:
    try:
        document = json.loads(payload)
        text = document["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return text if isinstance(text, str) and text else None


def declined_while_draining(payload: bytes) -> bool:
    """vLLM's answer to a request that arrives while it drains: finished as 'abort' before any
    token was generated (a request aborted mid-way has tokens, and is lost, not declined)."""
    try:
        document = json.loads(payload)
        reason = document["choices"][0]["finish_reason"]
        tokens = document.get("usage", {}).get("completion_tokens", 0)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return False
    return reason == "abort" and tokens == 0


# vLLM's answer to a request that reaches the API server after its engine exited (EngineDeadError).
ENGINE_STOPPED = {"message": "The server had an error while processing your request.", "code": 500}


def engine_stopped(status: int, payload: bytes) -> bool:
    try:
        error = json.loads(payload)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return status == 500 and isinstance(error, dict) and ENGINE_STOPPED.items() <= error.items()


def send_one(call: CompletionCall, timeout_s: float) -> Outcome:
    connection = call.connection(timeout_s)
    try:
        try:
            connection.connect()
        except ssl.SSLError as exc:
            return Outcome(FAILED, f"TLS: {exc}")
        except OSError as exc:
            # Nothing listened (or the host is gone): the request never reached the service.
            return Outcome(REFUSED, f"connect: {type(exc).__name__}")
        try:
            connection.request("POST", call.path, body=call.body, headers=call.headers)
            response = connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as exc:
            return Outcome(FAILED, f"taken, then {type(exc).__name__}: {exc}")
    finally:
        connection.close()
    if response.status in REFUSING_STATUSES:
        return Outcome(REFUSED, f"HTTP {response.status}")
    if engine_stopped(response.status, payload):
        return Outcome(REFUSED, "HTTP 500, engine already stopped")
    if response.status != 200:
        return Outcome(FAILED, f"HTTP {response.status}: {payload[:200]!r}")
    if declined_while_draining(payload):
        return Outcome(REFUSED, "HTTP 200, aborted unstarted while draining")
    text = completion_text(payload)
    if text is None:
        return Outcome(FAILED, f"HTTP 200 without a completion: {payload[:200]!r}")
    if call.expect_text is not None and call.expect_text not in text:
        return Outcome(FAILED, f"wrong answer {text[:80]!r}, expected {call.expect_text!r}")
    return Outcome(ANSWERED, "HTTP 200")


class RequestStream:
    """Worker threads sending requests until a limit is hit; counts every outcome once."""

    def __init__(self, call: CompletionCall, limits: StreamLimits) -> None:
        self._call = call
        self._limits = limits
        self._lock = threading.Lock()
        self._report = StreamReport()
        self._reasons: Counter[str] = Counter()
        self._deadline = 0.0

    def _take_ticket(self) -> bool:
        with self._lock:
            if self._report.sent >= self._limits.max_requests:
                return False
            if time.monotonic() >= self._deadline:
                return False
            if self._limits.stop_file is not None and self._limits.stop_file.exists():
                return False
            self._report.sent += 1
            return True

    def _record(self, outcome: Outcome, took_s: float) -> None:
        with self._lock:
            self._report.slowest_s = max(self._report.slowest_s, round(took_s, 3))
            if outcome.kind == ANSWERED:
                self._report.answered += 1
            elif outcome.kind == REFUSED:
                self._report.refused += 1
            else:
                self._report.failed += 1
                if len(self._report.failure_samples) < MAX_REASON_SAMPLES:
                    self._report.failure_samples.append(outcome.reason)
            self._reasons[f"{outcome.kind}: {outcome.reason.split(':')[0]}"] += 1

    def _worker(self, number: int) -> None:
        call = self._call.for_worker(number)
        while self._take_ticket():
            started = time.monotonic()
            outcome = send_one(call, self._limits.request_timeout_s)
            self._record(outcome, time.monotonic() - started)
            pause = self._limits.refused_pause_s if outcome.kind == REFUSED else 0.0
            time.sleep(max(pause, self._limits.pause_s))

    def run(self) -> StreamReport:
        started = time.monotonic()
        self._deadline = started + self._limits.max_seconds
        workers = [
            threading.Thread(target=self._worker, args=(number,), daemon=True)
            for number in range(self._limits.concurrency)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            # A request started just before the deadline may take its whole timeout.
            worker.join(self._limits.max_seconds + self._limits.request_timeout_s + 5)
        with self._lock:
            self._report.seconds = round(time.monotonic() - started, 3)
            self._report.reasons = dict(sorted(self._reasons.items()))
            return StreamReport(**asdict(self._report))


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="API base URL, e.g. http://172.17.0.3:8000")
    parser.add_argument("--model", required=True, help="model name the API serves")
    parser.add_argument("--prompt", default="The capital of France is")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--expect", help="text every answer must contain")
    parser.add_argument("--api-key-env", help="environment variable holding the API key")
    parser.add_argument("--cacert", type=Path, help="CA certificate of an https URL (PEM)")
    parser.add_argument("--tls-name", help="name the certificate must carry (default: URL host)")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        help="'Name: value' added to every request; {worker} is the worker's number",
    )
    parser.add_argument("--max-requests", type=int, default=1000)
    parser.add_argument("--max-seconds", type=float, default=120.0)
    parser.add_argument("--request-timeout", type=float, default=30.0)
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between requests")
    parser.add_argument(
        "--refused-pause", type=float, default=0.25, help="seconds to wait after a refusal"
    )
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--stop-file", type=Path, help="stop as soon as this file exists")
    parser.add_argument("--report", type=Path, help="also write the JSON report here")
    args = parser.parse_args(argv)
    if not 0 < args.max_requests <= 100_000:
        parser.error("--max-requests must be between 1 and 100000")
    if not 0 < args.max_seconds <= 3600:
        parser.error("--max-seconds must be between 0 and 3600")
    if not 0 < args.concurrency <= 16:
        parser.error("--concurrency must be between 1 and 16")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    try:
        call = completion_call(
            args.url,
            args.model,
            args.prompt,
            args.max_tokens,
            api_key,
            args.expect,
            cafile=args.cacert,
            tls_name=args.tls_name,
            extra_headers=args.header,
        )
    except ValueError as exc:
        print(f"request_stream: {exc}", file=sys.stderr)
        return 2
    limits = StreamLimits(
        max_requests=args.max_requests,
        max_seconds=args.max_seconds,
        request_timeout_s=args.request_timeout,
        pause_s=args.pause,
        refused_pause_s=args.refused_pause,
        concurrency=args.concurrency,
        stop_file=args.stop_file,
    )
    report = RequestStream(call, limits).run()
    print(report.to_json(), flush=True)
    if args.report is not None:
        args.report.write_text(report.to_json() + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
