"""The exporter as it runs on a node: a subprocess serving on a free port of 127.0.0.1, scraped
over HTTP and read back with Prometheus' own parser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from lab import nvidia_smi_standin, spark_tree
from tests.helpers import REPO

FILES = REPO / "roles/spark_exporter/files"
LOCAL = ("--listen-address", "127.0.0.1", "--port", "0")  # a free port, which it logs
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


@dataclass
class Scrape:
    """One scrape: the text, and every sample by (name, labels) as the parser read it."""

    text: str
    content_type: str
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]
    types: dict[str, str]

    def value(self, name: str, **labels: str) -> float:
        return self.samples[(name, tuple(sorted(labels.items())))]

    def has(self, name: str, **labels: str) -> bool:
        return (name, tuple(sorted(labels.items()))) in self.samples

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


def parse(text: str, content_type: str = "") -> Scrape:
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
            types[sample.name] = family.type
    return Scrape(text, content_type, samples, types)


@dataclass
class Exporter:
    url: str
    log: Path

    def scrape(self, query: str = "") -> Scrape:
        with urllib.request.urlopen(f"{self.url}/metrics{query}", timeout=30) as answer:
            return parse(answer.read().decode("utf-8"), answer.headers["Content-Type"])


@dataclass
class Node:
    """A made-up Spark: its sysfs and procfs, an nvidia-smi double, the overlay's directories."""

    root: Path
    sysfs: Path
    procfs: Path
    nvidia_smi: Path
    overlay_dir: Path
    stats_dir: Path

    def arguments(self) -> list[str]:
        return [
            "--sysfs-root", str(self.sysfs),
            "--procfs-root", str(self.procfs),
            "--nvidia-smi", str(self.nvidia_smi),
            "--twin", spark_tree.TWINS[0].interface,
            "--twin", spark_tree.TWINS[1].interface,
            "--expected-mtu", "9000",
            "--overlay-dir", str(self.overlay_dir),
            "--overlay-stats-dir", str(self.stats_dir),
            "--memory-floor-bytes", str(5 << 30),
        ]  # fmt: skip


@pytest.fixture
def node(tmp_path: Path) -> Node:
    sysfs, procfs = spark_tree.build(tmp_path / "node")
    overlay = tmp_path / "overlay"
    (overlay / "releases/0.1.0-9eb9a229b23d").mkdir(parents=True)
    (overlay / "current").symlink_to("releases/0.1.0-9eb9a229b23d")
    stats = tmp_path / "overlay-calls"
    (stats / "vllm-tp2-rank0").mkdir(parents=True)
    return Node(
        root=tmp_path,
        sysfs=sysfs,
        procfs=procfs,
        nvidia_smi=nvidia_smi_standin.install(tmp_path / "bin"),
        overlay_dir=overlay,
        stats_dir=stats,
    )


@pytest.fixture
def start_exporter(tmp_path: Path) -> Iterator[Callable[..., Exporter]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(*arguments: str) -> Exporter:
        log = tmp_path / f"exporter-{len(processes)}.log"
        env = {**os.environ, "PYTHONPATH": str(FILES), "PYTHONDONTWRITEBYTECODE": "1"}
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "spark_exporter", *LOCAL, *arguments],
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )
        processes.append(process)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if match := LISTENING.search(log.read_text(encoding="utf-8")):
                return Exporter(f"http://127.0.0.1:{match[1]}", log)
            assert process.poll() is None, log.read_text(encoding="utf-8")
            time.sleep(0.02)
        raise AssertionError(f"the exporter did not start: {log.read_text(encoding='utf-8')}")

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)
