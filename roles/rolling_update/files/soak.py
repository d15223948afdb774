#!/usr/bin/env python3
"""Hold a pair on its new release under load for a set time; fail on a stall or low memory.

The known failure of TP2 collectives (a hang after 20-30 minutes with some NCCL builds) and the
slow loss of free memory show only under sustained load. On rank 0 (``--load``) this sends a
stream of completions to the local API and, every second, reads vLLM's ``/metrics``: when
requests run and ``vllm:generation_tokens_total`` has not moved for ``--stall-s`` seconds, the
collective is stalled. On every node it samples ``MemAvailable``: under ``--floor-bytes`` is a
failure too. One JSON line is printed at the end; the exit status is 0 only for "held".

    soak.py --seconds 1800 --floor-bytes 5368709120                       # a node's memory only
    soak.py --seconds 1800 --floor-bytes 5368709120 --load --url http://127.0.0.1:8000 \\
        --model glm-5.3-flash --api-key-env SOAK_API_KEY --concurrency 4
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

HELD = "held"
STALLED = "stalled"
LOW_MEMORY = "low memory"
NO_METRICS = "no metrics"
TOKENS = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"


@dataclass
class SoakReport:
    verdict: str = HELD
    reason: str = ""
    seconds: float = 0.0
    sent: int = 0
    answered: int = 0
    failed: int = 0
    tokens: float = 0.0
    lowest_available_bytes: int = 0
    failure_samples: list[str] = field(default_factory=list)


def mem_available(meminfo: Path) -> int:
    for line in meminfo.read_text(encoding="utf-8").splitlines():
        if line.startswith("MemAvailable:"):
            value, unit = line.split()[1:3]
            return int(value) * (1024 if unit == "kB" else 1)
    raise ValueError(f"{meminfo} has no MemAvailable line")


def metric_sum(exposition: str, name: str) -> float | None:
    """The sum of a metric's samples over its labels (None when the exposition lacks it)."""
    total, seen = 0.0, False
    for line in exposition.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        rest = line[len(name) :]
        if rest[:1] not in ("{", " "):
            continue  # another metric whose name starts with this one
        value = rest.rpartition("}")[2] if rest.startswith("{") else rest
        total += float(value.split()[0])  # a timestamp may follow the value
        seen = True
    return total if seen else None


@dataclass(frozen=True)
class Api:
    host: str
    port: int
    model: str
    api_key: str
    prompt: str
    max_tokens: int
    timeout_s: float

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        headers = {"Authorization": f"Bearer {self.api_key}", "Content-Type": "application/json"}
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def complete(self) -> str | None:
        """None when answered; else why not."""
        body = {"model": self.model, "prompt": self.prompt, "max_tokens": self.max_tokens}
        try:
            status, payload = self._request("POST", "/v1/completions", json.dumps(body).encode())
        except (OSError, http.client.HTTPException) as exc:
            return f"{type(exc).__name__}: {exc}"
        if status != 200:
            return f"HTTP {status}: {payload[:120]!r}"
        return None

    def metrics(self) -> str | None:
        try:
            status, payload = self._request("GET", "/metrics")
        except (OSError, http.client.HTTPException):
            return None
        return payload.decode("utf-8", "replace") if status == 200 else None


class Soak:
    def __init__(
        self,
        seconds: float,
        floor_bytes: int,
        meminfo: Path,
        api: Api | None,
        concurrency: int,
        stall_s: float,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = 1.0,
    ) -> None:
        self.seconds, self.floor_bytes, self.meminfo = seconds, floor_bytes, meminfo
        self.api, self.concurrency, self.stall_s = api, concurrency, stall_s
        self.clock, self.interval_s = clock, interval_s
        self.report = SoakReport()
        self._lock = threading.Lock()
        self._done = threading.Event()

    def _finish(self, verdict: str, reason: str) -> None:
        with self._lock:
            if self.report.verdict == HELD:
                self.report.verdict, self.report.reason = verdict, reason
        self._done.set()

    def _load(self) -> None:
        assert self.api is not None
        while not self._done.is_set():
            with self._lock:
                self.report.sent += 1
            problem = self.api.complete()
            with self._lock:
                if problem is None:
                    self.report.answered += 1
                else:
                    self.report.failed += 1
                    if len(self.report.failure_samples) < 5:
                        self.report.failure_samples.append(problem)
            if problem is not None:
                self._done.wait(self.interval_s)  # a client backs off on errors

    def _watch_tokens(self, state: dict[str, float]) -> None:
        """One look at the API's metrics; a stall ends the soak."""
        assert self.api is not None
        exposition = self.api.metrics()
        now = self.clock()
        tokens = metric_sum(exposition, TOKENS) if exposition else None
        running = metric_sum(exposition, RUNNING) if exposition else None
        if tokens is None or running is None:
            if now - state["metrics_seen_at"] > self.stall_s:
                self._finish(
                    NO_METRICS, f"{TOKENS} or {RUNNING} unreadable for {self.stall_s:.0f} s"
                )
            return
        state["metrics_seen_at"] = now
        self.report.tokens = tokens
        if tokens != state["tokens"] or running == 0:
            state["tokens"], state["moved_at"] = tokens, now
        elif now - state["moved_at"] >= self.stall_s:
            self._finish(
                STALLED,
                f"{running:.0f} request(s) running and no token generated for "
                f"{now - state['moved_at']:.0f} s (a stalled collective)",
            )

    def _watch_memory(self) -> None:
        available = mem_available(self.meminfo)
        lowest = self.report.lowest_available_bytes
        self.report.lowest_available_bytes = available if not lowest else min(lowest, available)
        if available < self.floor_bytes:
            self._finish(
                LOW_MEMORY,
                f"MemAvailable {available / 2**30:.2f} GiB under the floor "
                f"{self.floor_bytes / 2**30:.2f} GiB",
            )

    def run(self) -> SoakReport:
        started = self.clock()
        state = {"tokens": -1.0, "moved_at": started, "metrics_seen_at": started}
        workers = []
        if self.api is not None:
            workers = [
                threading.Thread(target=self._load, daemon=True) for _ in range(self.concurrency)
            ]
        for worker in workers:
            worker.start()
        while not self._done.is_set():
            self._watch_memory()
            if self.api is not None and not self._done.is_set():
                self._watch_tokens(state)
            if self.clock() - started >= self.seconds:
                self._done.set()
            self._done.wait(self.interval_s)
        # Held: the requests in flight end as they do. Failed: a stalled request may never end,
        # and the pair must roll back now, not once its request times out.
        wait_s = (self.api.timeout_s + 5 if self.api else 0) if self.report.verdict == HELD else 0
        for worker in workers:
            worker.join(wait_s)
        self.report.seconds = round(self.clock() - started, 1)
        return self.report


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--floor-bytes", type=int, required=True)
    parser.add_argument("--meminfo", type=Path, default=Path("/proc/meminfo"))
    parser.add_argument("--load", action="store_true", help="send the stream and watch tokens")
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="")
    parser.add_argument("--api-key-env", default="SOAK_API_KEY")
    parser.add_argument("--prompt", default="Write a long story about a lighthouse keeper.")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--stall-s", type=float, default=60.0)
    parser.add_argument("--request-timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.stall_s <= 0:
        parser.error("--seconds and --stall-s must be positive")
    if args.load and not args.model:
        parser.error("--load needs --model")
    if not 1 <= args.concurrency <= 64:
        parser.error("--concurrency must be between 1 and 64")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    api = None
    if args.load:
        parts = urlsplit(args.url)
        api = Api(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 80,
            model=args.model,
            api_key=os.environ.get(args.api_key_env, ""),
            prompt=args.prompt,
            max_tokens=args.max_tokens,
            timeout_s=args.request_timeout,
        )
    soak = Soak(args.seconds, args.floor_bytes, args.meminfo, api, args.concurrency, args.stall_s)
    report = soak.run()
    print(json.dumps(asdict(report), sort_keys=True), flush=True)
    return 0 if report.verdict == HELD else 1


if __name__ == "__main__":
    sys.exit(main())
