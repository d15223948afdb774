"""The watchdog daemon on a made-up procfs whose meminfo the test rewrites: it drains within
samples x interval (and a little slack) of the crossing, once; a dip does not drain; it re-arms
after recovery; rank 0 drains on its peer's reading, served by a small HTTP server here and by a
real spark exporter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lab import spark_tree
from tests.memory_watchdog.conftest import GIB, Watchdog
from tests.spark_exporter.conftest import Exporter, parse

Start = Callable[..., Watchdog]
LOW_KIB, HIGH_KIB = 3 * spark_tree.GIB_KIB, 100 * spark_tree.GIB_KIB
SLACK_S = 0.6  # scheduling on a busy two-core machine, and the drain double's start


def go_low(watchdog: Watchdog) -> float:
    """Put the box under the floor; when, as Unix time."""
    crossed = time.time()
    spark_tree.set_available(watchdog.procfs, LOW_KIB)
    return crossed


def test_it_drains_within_samples_times_interval_of_the_crossing_and_once(
    start_watchdog: Start,
) -> None:
    interval, samples = 0.2, 3
    watchdog = start_watchdog("--interval", str(interval), "--samples", str(samples))

    crossed = go_low(watchdog)
    state = watchdog.wait_for(lambda s: s["drained"] and not s["draining"])

    (drained,) = watchdog.drained()
    assert (samples - 1) * interval - 0.05 <= drained - crossed <= samples * interval + SLACK_S
    assert state["drain_exit_code"] == 0 and state["low"] == {"self": True}
    arguments = watchdog.drain_double.with_name("drain-arguments").read_text(encoding="utf-8")
    assert arguments == "stop vllm-tp2-rank0.service\n"
    time.sleep(10 * interval)
    assert len(watchdog.drained()) == 1, "still low: no second drain"
    said = watchdog.said()
    assert "under the floor for 3 samples (self 3.00 GiB < 5.00 GiB): draining the pair" in said
    textfile = parse((watchdog.textfile_dir / "spark_memory_watchdog.prom").read_text())
    assert textfile.value("spark_memory_watchdog_drained") == 1
    assert textfile.value("spark_memory_watchdog_drains_total") == 1
    assert textfile.value("spark_memory_watchdog_low", box="self") == 1
    assert textfile.value("spark_memory_watchdog_drain_failed") == 0
    assert abs(textfile.value("spark_memory_watchdog_last_drain_timestamp_seconds") - drained) < 1


def test_a_single_dip_does_not_drain(start_watchdog: Start) -> None:
    watchdog = start_watchdog("--interval", "0.2", "--samples", "5")

    go_low(watchdog)
    watchdog.wait_for(lambda s: s["available_bytes"]["self"] == LOW_KIB * 1024)
    spark_tree.set_available(watchdog.procfs, HIGH_KIB)  # back before the fifth sample
    watchdog.wait_for(lambda s: s["available_bytes"]["self"] == HIGH_KIB * 1024)
    time.sleep(1.2)

    assert watchdog.drained() == []
    assert watchdog.state()["armed"] is True
    assert "back above the floor" in watchdog.said()


def test_it_re_arms_after_recovery_and_the_hold_off_and_drains_again(
    start_watchdog: Start,
) -> None:
    watchdog = start_watchdog("--interval", "0.1", "--samples", "3", "--holdoff", "1")

    go_low(watchdog)
    watchdog.wait_for(lambda s: s["drained"])
    spark_tree.set_available(watchdog.procfs, HIGH_KIB)
    watchdog.wait_for(lambda s: s["armed"])
    assert "re-armed" in watchdog.said()
    go_low(watchdog)
    watchdog.wait_for(lambda s: s["drains"] == 2 and not s["draining"])

    first, second = watchdog.drained()
    assert second - first >= 1, "never sooner than the hold-off"


def test_a_failed_drain_is_said_and_not_repeated(start_watchdog: Start) -> None:
    watchdog = start_watchdog("--interval", "0.1", "--samples", "2")
    watchdog.drain_double.with_name("status").write_text("1\n")

    go_low(watchdog)
    state = watchdog.wait_for(lambda s: s["drain_exit_code"] is not None)
    time.sleep(0.5)

    assert state["drain_exit_code"] == 1
    assert len(watchdog.drained()) == 1
    assert "the drain command failed (exit status 1)" in watchdog.said()
    textfile = parse((watchdog.textfile_dir / "spark_memory_watchdog.prom").read_text())
    assert textfile.value("spark_memory_watchdog_drain_failed") == 1


def test_rank_1_runs_no_drain_and_says_it_is_low(start_watchdog: Start) -> None:
    watchdog = start_watchdog("--interval", "0.1", "--samples", "2", drain=False)

    go_low(watchdog)
    state = watchdog.wait_for(lambda s: s["low"].get("self"))

    assert state["drained"] is False and state["drains"] == 0
    assert watchdog.drained() == []
    assert "no drain command here: the pair's rank-0 watchdog drains it" in watchdog.said()


class Peer:
    """A stand-in for the peer's exporter: answers /metrics with the MemAvailable it is given."""

    def __init__(self) -> None:
        self.available = 100 * GIB
        self.floor = 5 * GIB
        self.polls = 0
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                peer.polls += 1
                body = (
                    "# HELP spark_memory_available_bytes MemAvailable.\n"
                    "# TYPE spark_memory_available_bytes gauge\n"
                    f"spark_memory_available_bytes {peer.available}\n"
                    f"spark_memory_floor_bytes {peer.floor}\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics?collect[]=memory"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def peer() -> Iterator[Peer]:
    served = Peer()
    yield served
    served.server.shutdown()
    served.server.server_close()


def test_rank_0_drains_when_its_peer_is_under_the_floor(start_watchdog: Start, peer: Peer) -> None:
    watchdog = start_watchdog("--interval", "0.1", "--samples", "3", "--peer-url", peer.url)
    watchdog.wait_for(lambda s: s["peer_up"] is True)

    peer.available = 2 * GIB
    state = watchdog.wait_for(lambda s: s["drained"] and not s["draining"])

    assert state["low"] == {"self": False, "peer": True}
    assert len(watchdog.drained()) == 1
    textfile = parse((watchdog.textfile_dir / "spark_memory_watchdog.prom").read_text())
    assert textfile.value("spark_memory_watchdog_peer_up") == 1
    assert textfile.value("spark_memory_watchdog_low", box="peer") == 1


def test_an_unreachable_peer_alone_never_drains(start_watchdog: Start, tmp_path: Path) -> None:
    watchdog = start_watchdog(
        "--interval", "0.1", "--samples", "2", "--peer-url", "http://127.0.0.1:9/metrics"
    )

    state = watchdog.wait_for(lambda s: s["peer_up"] is False)
    time.sleep(0.6)

    assert watchdog.drained() == []
    assert state["armed"] is True
    assert "the peer gave no reading" in watchdog.said()


def test_the_peer_poll_reads_a_real_spark_exporter(
    start_watchdog: Start, start_exporter: Callable[..., Exporter], tmp_path: Path
) -> None:
    sysfs, procfs = spark_tree.build(tmp_path / "peer")
    exporter = start_exporter(
        "--sysfs-root", str(sysfs), "--procfs-root", str(procfs),
        "--nvidia-smi", str(tmp_path / "none"), "--memory-floor-bytes", str(6 * GIB),
    )  # fmt: skip
    url = f"{exporter.url}/metrics?collect[]=memory"
    watchdog = start_watchdog("--interval", "0.1", "--samples", "3", "--peer-url", url)
    watchdog.wait_for(lambda s: s["available_bytes"].get("peer") == 100 * GIB)

    spark_tree.set_available(procfs, int(5.5 * spark_tree.GIB_KIB))  # above ours, under its floor
    watchdog.wait_for(lambda s: s["drained"])

    assert "peer 5.50 GiB < 6.00 GiB" in watchdog.said()
