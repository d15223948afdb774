"""The made-up Spark a lab host gets: the tree as the exporter reads it, the stand-in nvidia-smi
run by the host's Python, and MemAvailable rewritten whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab import spark_tree
from tests.helpers import REPO

SCRIPT = REPO / "lab/spark_tree.py"


def test_a_healthy_spark_has_both_twins_and_100_gib(tmp_path: Path) -> None:
    sysfs, procfs = spark_tree.build(tmp_path)
    for twin in spark_tree.TWINS:
        netdev = sysfs / "class/net" / twin.interface
        assert (netdev / "mtu").read_text().strip() == "9000"
        port = sysfs / "class/infiniband" / twin.device / "ports/1"
        assert (port / "state").read_text().strip() == "4: ACTIVE"
    assert "MemAvailable:    104857600 kB" in (procfs / "meminfo").read_text()


def test_put_lays_the_tree_out_with_the_hosts_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, ...]] = []
    copied: dict[str, str] = {}

    def docker(*args: str, stdin: str | None = None) -> None:
        calls.append(args)
        if args[0] == "cp":  # what would reach the host, read before the scratch goes
            tree = Path(args[1].removesuffix("/."))
            copied["nvidia-smi"] = (tree / "bin/nvidia-smi").read_text().splitlines()[0]
            copied["meminfo"] = (tree / "proc/meminfo").read_text()

    monkeypatch.setattr(spark_tree, "_docker", docker)
    spark_tree.put("lab-host", "/srv/made-up")
    assert calls[:2] == [
        ("exec", "lab-host", "rm", "-rf", "/srv/made-up"),
        ("exec", "lab-host", "mkdir", "-p", "/srv"),
    ]
    assert calls[2][0] == "cp" and calls[2][2] == "lab-host:/srv/made-up"
    assert copied["nvidia-smi"] == "#!/usr/bin/python3"
    assert "MemAvailable:    104857600 kB" in copied["meminfo"]


def test_memory_is_rewritten_whole_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[tuple[str, ...], str | None]] = []
    monkeypatch.setattr(spark_tree, "_docker", lambda *a, stdin=None: calls.append((a, stdin)))
    spark_tree.set_lab_available("lab-host", 3)
    ((args, stdin),) = calls
    assert args[:4] == ("exec", "-i", "lab-host", "sh")
    assert args[-1] == (
        "cat > /srv/lab-spark/proc/.meminfo.new"
        " && mv -f /srv/lab-spark/proc/.meminfo.new /srv/lab-spark/proc/meminfo"
    )
    assert stdin is not None and "MemAvailable:      3145728 kB" in stdin


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["memory", "--container", "x", "--available-gib", "-1"], "must be 0 or more"),
        (["memory", "--container", "x"], "--available-gib"),
        (["put"], "--container"),
    ],
)
def test_wrong_arguments_are_refused(arguments: list[str], says: str) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_a_host_that_is_not_there_fails_naming_it() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "put", "--container", "dualspark-no-such-host"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "spark_tree: docker exec dualspark-no-such-host" in done.stderr
