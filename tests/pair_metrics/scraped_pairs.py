"""Made-up pairs scraped by the packaged Prometheus, as pair_metrics configures it: each pair's
targets (rank 0's vLLM, node_exporter and the Spark exporter on both Sparks) are doubles on this
machine serving the metric names the role, the console page and the dashboards query; the server
runs the configuration the role renders for them, the role's rules and the package's console
library. A pair may lack a target (nothing listens on its port) or serve a family less."""

from __future__ import annotations

import itertools
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from pair_dashboards import metric_names

from tests.pair_metrics import promql
from tests.pair_metrics.render import ROLE, RULES, host_variables, render, tool

CONSOLES = promql.CONSOLE.parent
LIBRARY = Path(
    yaml.safe_load((ROLE / "defaults/main.yml").read_text(encoding="utf-8"))[
        "pair_metrics_console_library_source"
    ]
)
TWINS = ("enp1s0f1np1", "enP2p1s0f1np1")
# Label values for the Spark exporter's labelled families (the others carry none).
SPARK_LABELS: dict[str, list[dict[str, str]]] = {
    "spark_gpu_throttle_active": [{"reason": "sw_power_cap"}],
    "spark_rail_link_up": [{"twin": twin} for twin in TWINS],
    "spark_rail_port_active": [{"twin": TWINS[0], "device": "rocep1s0f1"}],
    "spark_rail_port_rate_gbps": [{"twin": TWINS[0], "device": "rocep1s0f1"}],
    "spark_rail_mtu_bytes": [{"twin": twin} for twin in TWINS],
    "spark_rail_expected_mtu_bytes": [{"twin": twin} for twin in TWINS],
    "spark_rail_transmit_bytes_total": [{"twin": twin} for twin in TWINS],
    "spark_rail_receive_bytes_total": [{"twin": twin} for twin in TWINS],
    "spark_nccl_transport": [{"transport": "ib"}],
    "spark_overlay_calls_total": [{"path": "marlin"}],
    "spark_overlay_release_info": [{"release": "r1"}],
    "spark_exporter_source_up": [{"source": "gpu"}],
}
SPARK_VALUES = {"spark_memory_available_bytes": 64 * 2**30, "spark_memory_floor_bytes": 5 * 2**30}
NODE_EXPORTER = promql.NODE_EXPORTER | metric_names.NODE
# A pair's targets: (target, job, index of the Spark it runs on).
TARGETS = (
    ("vllm", "vllm", 0),
    ("node-0", "node", 0),
    ("node-1", "node", 1),
    ("spark-0", "spark", 0),
    ("spark-1", "spark", 1),
)


def _line(name: str, labels: dict[str, str], value: float) -> str:
    inner = ",".join(f'{key}="{val}"' for key, val in labels.items())
    return f"{name}{{{inner}}} {value}" if inner else f"{name} {value}"


def vllm_exposition(scrape: int = 1, without: Collection[str] = ()) -> str:
    """What rank 0's vLLM serves at its `scrape`-th scrape: every family of
    files/vllm_metric_names.yml but those `without`; counters and histograms grow with each
    scrape, as they do while requests are served, so rates and quantiles have values."""
    lines = []
    for name, entry in promql.vllm_names().items():
        if name in without:
            continue
        labels = {label: "0" for label in entry["labels"] or []}
        labels.update({"model_name": "glm-5.3-flash"} if "model_name" in labels else {})
        if entry["type"] == "histogram":
            lines += [
                _line(f"{name}_bucket", {**labels, "le": "0.5"}, scrape),
                _line(f"{name}_bucket", {**labels, "le": "+Inf"}, 2 * scrape),
                _line(f"{name}_sum", labels, 0.7 * scrape),
                _line(f"{name}_count", labels, 2 * scrape),
            ]
        else:
            lines.append(_line(name, labels, 10 * scrape if entry["type"] == "counter" else 1))
    return "\n".join(lines) + "\n"


def spark_exposition(scrape: int = 1, without: Collection[str] = ()) -> str:
    """What the Spark exporter serves: each of its families but those `without`, labelled as it
    labels them; its counters grow with each scrape."""
    lines = []
    for name in sorted(promql.SPARK_EXPORTER - set(without)):
        value = 2**20 * scrape if name.endswith("_total") else SPARK_VALUES.get(name, 1)
        lines += [_line(name, labels, value) for labels in SPARK_LABELS.get(name, [{}])]
    return "\n".join(lines) + "\n"


def node_exposition(scrape: int = 1, without: Collection[str] = ()) -> str:
    """node_exporter's meminfo families that the rules and the dashboards query."""
    names = sorted(NODE_EXPORTER - set(without))
    return "\n".join(_line(name, {}, 64 * 2**30) for name in names) + "\n"


EXPOSITIONS: dict[str, Callable[[int, Collection[str]], str]] = {
    "vllm": vllm_exposition,
    "node": node_exposition,
    "spark": spark_exposition,
}


def _body(job: str, without: tuple[str, ...]) -> Callable[[int], str]:
    """What a target of `job` serves at each scrape, less the families `without`."""
    exposition = EXPOSITIONS[job]

    def body(scrape: int) -> str:
        return exposition(scrape, without)

    return body


class ScrapeTargetDouble:
    """Stands in for one exporter or vLLM's API: an HTTP server on this machine that serves an
    exposition at /metrics (and 404 elsewhere), as the real target's /metrics would; `body` makes
    it from the number of the scrape."""

    def __init__(self, body: Callable[[int], str]) -> None:
        scrapes = itertools.count(1)
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                found = self.path.split("?", 1)[0] == "/metrics"
                if found:
                    with lock:
                        payload = body(next(scrapes)).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(payload if found else b"")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        # Polled often, so that closing a pair's doubles takes a moment, not half a second each.
        serve = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        serve.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PairDoubles:
    """The targets of one made-up pair, on Sparks named `hosts` (rank 0 first). `missing` names
    targets (of TARGETS) that do not exist: nothing listens on their port; `without` maps a
    target to the families it leaves out."""

    def __init__(
        self,
        pair: str,
        hosts: tuple[str, str],
        *,
        missing: Collection[str] = (),
        without: Mapping[str, Collection[str]] | None = None,
    ) -> None:
        self.pair = pair
        self.hosts = hosts
        self.ports: dict[str, int] = {}
        self.doubles: dict[str, ScrapeTargetDouble] = {}
        unknown = (set(missing) | set(without or {})) - {target for target, _, _ in TARGETS}
        assert not unknown, f"no such target: {sorted(unknown)}"
        for target, job, _ in TARGETS:
            if target in missing:
                self.ports[target] = free_port()
                continue
            double = ScrapeTargetDouble(_body(job, tuple((without or {}).get(target, ()))))
            self.doubles[target] = double
            self.ports[target] = double.port

    def serves(self, job: str) -> list[str]:
        """The hosts on which a target of `job` exists."""
        return [
            self.hosts[index]
            for target, target_job, index in TARGETS
            if target_job == job and target in self.doubles
        ]

    def inventory_hosts(self) -> dict[str, dict[str, Any]]:
        hosts: dict[str, dict[str, Any]] = {
            host: {"pair_metrics_address": "127.0.0.1", "spark_pair_rank": rank}
            for rank, host in enumerate(self.hosts)
        }
        hosts[self.hosts[0]]["vllm_tp2_service_port"] = self.ports["vllm"]
        for rank, host in enumerate(self.hosts):
            hosts[host]["pair_metrics_node_exporter_port"] = self.ports[f"node-{rank}"]
            hosts[host]["spark_exporter_port"] = self.ports[f"spark-{rank}"]
        return hosts

    def close(self) -> None:
        for double in self.doubles.values():
            double.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def query(base: str, expr: str) -> dict[str, Any]:
    status, body = get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}")
    assert status == 200, f"{expr}: {status} {body}"
    answer: dict[str, Any] = json.loads(body)
    return answer


def _inventory(directory: Path, pairs: Sequence[PairDoubles]) -> Path:
    children = {
        pair.pair: {"hosts": pair.inventory_hosts(), "vars": {"spark_pair_name": pair.pair}}
        for pair in pairs
    }
    inventory = {
        "dualspark": {"children": children},
        "metrics": {"hosts": {"watch": {"ansible_host": "127.0.0.1"}}},
    }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory), encoding="utf-8")
    return path


def _ready(base: str, pairs: Sequence[PairDoubles], scrapes: int) -> bool:
    """Whether every target that exists was scraped `scrapes` times (a rate needs two samples)
    and the memory rules were evaluated twice."""
    targets = sum(len(pair.doubles) for pair in pairs)
    scraped = query(base, f'sum_over_time(up{{job=~"vllm|node|spark"}}[5m]) >= {scrapes}')
    if len(scraped["data"]["result"]) < targets:
        return False
    sparks = sum(len(set(pair.serves("spark")) | set(pair.serves("node"))) for pair in pairs)
    recorded = query(base, "count_over_time(spark:memory_available_bytes[5m]) >= 2")
    return len(recorded["data"]["result"]) >= sparks


@contextmanager
def running_prometheus(
    directory: Path, pairs: Sequence[PairDoubles], scrapes: int = 2
) -> Iterator[str]:
    """The base URL of the packaged Prometheus scraping `pairs` every second, once it has
    scraped each target `scrapes` times and evaluated the rules; stopped on leaving."""
    assert (LIBRARY / "prom.lib").is_file(), (
        f"{LIBRARY}/prom.lib is missing: Debian's prometheus package ships it (bin/setup installs "
        "the package)"
    )
    port = free_port()
    variables = {
        **host_variables(_inventory(directory, pairs), "watch"),
        "pair_metrics_rules_dir": str(RULES),
        "pair_metrics_scrape_interval": "1s",
        "pair_metrics_scrape_timeout": "900ms",
        "pair_metrics_evaluation_interval": "1s",
        "pair_metrics_listen_address": f"127.0.0.1:{port}",
    }
    (directory / "prometheus.yml").write_text(render("prometheus.yml.j2", variables), "utf-8")
    libraries = directory / "console_libraries"
    libraries.mkdir()
    shutil.copy(LIBRARY / "prom.lib", libraries / "prom.lib")
    log_path = directory / "prometheus.log"
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                f"--web.console.templates={CONSOLES}",
                f"--web.console.libraries={libraries}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            _wait_until_ready(base, pairs, scrapes, process, log_path)
            yield base
        finally:
            process.terminate()
            process.wait(timeout=30)


def _wait_until_ready(
    base: str,
    pairs: Sequence[PairDoubles],
    scrapes: int,
    process: subprocess.Popen[bytes],
    log: Path,
) -> None:
    # A bound on a broken setup only: a healthy server is ready after `scrapes` seconds or so.
    deadline = time.monotonic() + 60 + scrapes
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(log.read_text(encoding="utf-8"))
        try:
            if _ready(base, pairs, scrapes):
                return
        except (OSError, AssertionError):
            pass
        time.sleep(0.5)
    pytest.fail(f"Prometheus did not scrape the doubles and evaluate the rules: {log}")
