"""The soak gate's script against a test double of vLLM's API and a made-up /proc/meminfo."""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from tests.helpers import REPO
from tests.units import resolve, role_variables

GIB = 2**30


def load_soak() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "soak", REPO / "roles/rolling_update/files/soak.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["soak"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


soak = load_soak()


class VllmDouble(ThreadingHTTPServer):
    """Test double of vLLM's API: completions that count generated tokens in /metrics, or, once
    `stalled` is set, completions that never finish (a hung collective: requests run, no token)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), VllmHandler)
        self.tokens = 0
        self.running = 0
        self.stalled = threading.Event()
        self.released = threading.Event()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class VllmHandler(BaseHTTPRequestHandler):
    server: VllmDouble

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        assert self.path == "/metrics"
        with self.server.lock:
            labels = '{model_name="m",engine="0"}'
            body = (
                "# TYPE vllm:generation_tokens_total counter\n"
                f"vllm:generation_tokens_total{labels} {self.server.tokens}.0\n"
                "# TYPE vllm:num_requests_running gauge\n"
                f"vllm:num_requests_running{labels} {self.server.running}.0\n"
            ).encode()
        self._send(200, body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        with self.server.lock:
            self.server.running += 1
        if self.server.stalled.is_set():
            self.server.released.wait(30)
        else:
            time.sleep(0.02)
            with self.server.lock:
                self.server.tokens += 4
        with self.server.lock:
            self.server.running -= 1
        self._send(200, json.dumps({"choices": [{"text": " 4"}]}).encode())

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def vllm() -> Iterator[VllmDouble]:
    server = VllmDouble()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.released.set()
    server.shutdown()


def write_meminfo(path: Path, available: int) -> Path:
    path.write_text(
        f"MemTotal:       128000000 kB\nMemFree:         1000000 kB\n"
        f"MemAvailable:   {available // 1024} kB\n",
        encoding="utf-8",
    )
    return path


def api_for(server: VllmDouble, timeout_s: float = 10) -> object:
    return soak.Api("127.0.0.1", server.server_address[1], "m", "key", "Q", 8, timeout_s)


def run_soak(meminfo: Path, api: object | None, seconds: float = 2.0) -> object:
    gate = soak.Soak(seconds, 5 * GIB, meminfo, api, 2, stall_s=0.6, interval_s=0.05)
    return gate.run()


def test_a_pair_that_keeps_generating_is_held(vllm: VllmDouble, tmp_path: Path) -> None:
    report = run_soak(write_meminfo(tmp_path / "meminfo", 40 * GIB), api_for(vllm))
    assert report.verdict == soak.HELD, report
    assert report.answered > 10 and report.failed == 0
    assert 0 < report.tokens <= vllm.tokens  # read from /metrics while it ran
    assert report.lowest_available_bytes == 40 * GIB


def test_requests_running_without_tokens_are_a_stall(vllm: VllmDouble, tmp_path: Path) -> None:
    meminfo = write_meminfo(tmp_path / "meminfo", 40 * GIB)
    threading.Timer(0.5, vllm.stalled.set).start()
    started = time.monotonic()
    report = run_soak(meminfo, api_for(vllm, timeout_s=1), seconds=20)
    assert report.verdict == soak.STALLED, report
    assert "no token generated" in report.reason
    # Found within the stall time (and a few looks), not at the end of the soak.
    assert time.monotonic() - started < 5


def test_a_stall_is_reported_without_waiting_for_the_stalled_requests(
    vllm: VllmDouble, tmp_path: Path
) -> None:
    # The stalled requests would time out only after 60 s: the verdict may not wait for them.
    meminfo = write_meminfo(tmp_path / "meminfo", 40 * GIB)
    threading.Timer(0.5, vllm.stalled.set).start()
    started = time.monotonic()
    report = run_soak(meminfo, api_for(vllm, timeout_s=60), seconds=20)
    assert report.verdict == soak.STALLED, report
    assert time.monotonic() - started < 5, report


def test_an_idle_server_is_no_stall(vllm: VllmDouble, tmp_path: Path) -> None:
    # Tokens that do not move while nothing runs are no stall: only the memory is watched here.
    gate = soak.Soak(
        1.0, 5 * GIB, write_meminfo(tmp_path / "m", 40 * GIB), None, 1, 0.3, interval_s=0.05
    )
    report = gate.run()
    assert report.verdict == soak.HELD and report.sent == 0


def test_memory_under_the_floor_ends_the_soak(tmp_path: Path) -> None:
    meminfo = write_meminfo(tmp_path / "meminfo", 40 * GIB)
    threading.Timer(0.3, write_meminfo, (meminfo, 4 * GIB)).start()
    report = run_soak(meminfo, None, seconds=20)
    assert report.verdict == soak.LOW_MEMORY, report
    assert "under the floor 5.00 GiB" in report.reason
    assert report.lowest_available_bytes == 4 * GIB


def test_metrics_that_cannot_be_read_end_the_soak(tmp_path: Path) -> None:
    closed = soak.Api("127.0.0.1", 9, "m", "key", "Q", 8, 1)  # the discard port: nothing listens
    report = run_soak(write_meminfo(tmp_path / "meminfo", 40 * GIB), closed, seconds=20)
    assert report.verdict == soak.NO_METRICS, report


def test_metric_sum_adds_labels_and_skips_longer_names() -> None:
    exposition = (
        "# HELP vllm:num_requests_running Requests running\n"
        'vllm:num_requests_running{engine="0"} 2.0\n'
        'vllm:num_requests_running{engine="1"} 1.0 1700000000\n'
        'vllm:num_requests_running_max{engine="0"} 9.0\n'
    )
    assert soak.metric_sum(exposition, "vllm:num_requests_running") == 3.0
    assert soak.metric_sum(exposition, "vllm:generation_tokens_total") is None


def test_command_line_exit_status_follows_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meminfo = write_meminfo(tmp_path / "meminfo", 2 * GIB)
    assert (
        soak.main(["--seconds", "5", "--floor-bytes", str(5 * GIB), "--meminfo", str(meminfo)]) == 1
    )
    assert json.loads(capsys.readouterr().out)["verdict"] == soak.LOW_MEMORY


def test_the_soak_loads_the_service_as_the_inventory_or_its_defaults_have_it() -> None:
    # rolling_update runs the soak outside vllm_tp2_service, whose defaults it cannot see: its
    # fallbacks must be those defaults, and the inventory's settings must win over them.
    service = role_variables("vllm_tp2_service", {})
    alone = role_variables("rolling_update", {})
    assert resolve(alone, "rolling_update_soak_url") == (
        f"http://127.0.0.1:{service['vllm_tp2_service_port']}"
    )
    assert (
        resolve(alone, "rolling_update_soak_model")
        == (service["vllm_tp2_service_served_model_name"])
    )
    assert resolve(alone, "rolling_update_soak_meminfo") == "/proc/meminfo"
    inventory = {
        "vllm_tp2_service_port": 8100,
        "vllm_tp2_service_served_model_name": "other",
        "memory_watchdog_procfs_root": "/srv/lab-spark/proc",
    }
    configured = role_variables("rolling_update", inventory)
    assert resolve(configured, "rolling_update_soak_url") == "http://127.0.0.1:8100"
    assert resolve(configured, "rolling_update_soak_model") == "other"
    assert resolve(configured, "rolling_update_soak_meminfo") == "/srv/lab-spark/proc/meminfo"
