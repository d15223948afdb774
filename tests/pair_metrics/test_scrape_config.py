"""prometheus.yml.j2 rendered as pair_metrics renders it, for inventory/production and for a
made-up inventory of two pairs and a front door: the jobs, targets and labels the inventory says,
and a configuration `promtool check config` passes (with the role's rules files, which it checks
too); /etc/default/prometheus with flags the packaged server knows."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pair_metrics.render import (
    PRODUCTION,
    RULES,
    host_variables,
    promtool,
    render,
    tool,
)

MADE_UP = {
    "dualspark": {
        "children": {
            "pair_a": {
                "hosts": {
                    "a0": {"ansible_host": "10.0.0.10", "spark_pair_rank": 0},
                    "a1": {"ansible_host": "10.0.0.11", "spark_pair_rank": 1},
                },
                "vars": {"spark_pair_name": "pair_a"},
            },
            "pair_b": {
                "hosts": {
                    # Scraped on another network than Ansible reaches it on, over IPv6.
                    "b0": {
                        "ansible_host": "b0.example.internal",
                        "pair_metrics_address": "fd00::20",
                        "spark_pair_rank": 0,
                        "vllm_tp2_service_port": 8001,
                    },
                    "b1": {
                        "ansible_host": "b1.example.internal",
                        "spark_pair_rank": 1,
                        "spark_exporter_port": 9900,
                    },
                },
                "vars": {"spark_pair_name": "pair_b"},
            },
        }
    },
    "front_door": {"hosts": {"door": {"ansible_host": "door.example.internal"}}},
    "metrics": {"hosts": {"watch": {"ansible_host": "watch.example.internal"}}},
}


def _jobs(text: str) -> dict[str, list[dict[str, Any]]]:
    """job name -> its static configs, from a rendered configuration."""
    config = yaml.safe_load(text)
    return {job["job_name"]: job["static_configs"] for job in config["scrape_configs"]}


def _targets(configs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    found = {}
    for config in configs:
        (target,) = config["targets"]
        found[target] = config["labels"]
    return found


def _checked(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "prometheus.yml"
    path.write_text(text, encoding="utf-8")
    return promtool("check", "config", path)


@pytest.fixture(scope="module")
def production() -> dict[str, Any]:
    """The variables of the production example's metrics host (spark-01, rank 0 of pair_one),
    its rules directory the repository's own so that promtool checks those files."""
    (metrics_host,) = yaml.safe_load(PRODUCTION.read_text(encoding="utf-8"))["metrics"]["hosts"]
    return {**host_variables(PRODUCTION, metrics_host), "pair_metrics_rules_dir": str(RULES)}


def test_the_production_example_renders_to_a_configuration_promtool_passes(
    production: dict[str, Any], tmp_path: Path
) -> None:
    text = render("prometheus.yml.j2", production)
    result = _checked(text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(list(RULES.glob('*.yml')))} rule files found" in result.stdout


def test_the_production_example_scrapes_each_spark_with_its_pair_node_and_rank(
    production: dict[str, Any],
) -> None:
    jobs = _jobs(render("prometheus.yml.j2", production))
    spark_01 = {"pair": "pair_one", "node": "spark-01", "rank": "0"}
    spark_02 = {"pair": "pair_one", "node": "spark-02", "rank": "1"}
    assert set(jobs) == {"prometheus", "vllm", "node", "spark"}  # no front_door group
    assert _targets(jobs["vllm"]) == {"spark-01.example.internal:8000": spark_01}
    assert _targets(jobs["node"]) == {
        "spark-01.example.internal:9100": spark_01,
        "spark-02.example.internal:9100": spark_02,
    }
    assert _targets(jobs["spark"]) == {
        "spark-01.example.internal:9835": spark_01,
        "spark-02.example.internal:9835": spark_02,
    }
    config = yaml.safe_load(render("prometheus.yml.j2", production))
    assert config["global"]["scrape_interval"] == "5s"
    assert config["rule_files"] == [f"{RULES}/*.yml"]
    assert "alerting" not in config


@pytest.fixture(scope="module")
def made_up(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    directory = tmp_path_factory.mktemp("inventory")
    (directory / "hosts.yml").write_text(yaml.safe_dump(MADE_UP), encoding="utf-8")
    return {
        **host_variables(directory / "hosts.yml", "watch"),
        "pair_metrics_rules_dir": str(RULES),
        "pair_metrics_alertmanagers": ["alerts.example.internal:9093"],
    }


def test_two_pairs_and_a_front_door(made_up: dict[str, Any], tmp_path: Path) -> None:
    text = render("prometheus.yml.j2", made_up)
    result = _checked(text, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = _jobs(text)

    def labels(pair: str, node: str, rank: str) -> dict[str, str]:
        return {"pair": pair, "node": node, "rank": rank}

    assert _targets(jobs["vllm"]) == {
        "10.0.0.10:8000": labels("pair_a", "a0", "0"),
        "[fd00::20]:8001": labels("pair_b", "b0", "0"),
    }
    assert _targets(jobs["spark"]) == {
        "10.0.0.10:9835": labels("pair_a", "a0", "0"),
        "10.0.0.11:9835": labels("pair_a", "a1", "1"),
        "[fd00::20]:9835": labels("pair_b", "b0", "0"),
        "b1.example.internal:9900": labels("pair_b", "b1", "1"),
    }
    assert len(jobs["node"]) == 4
    assert _targets(jobs["front_door"]) == {"door.example.internal:8405": {"node": "door"}}
    assert _targets(jobs["prometheus"]) == {"localhost:9090": {"node": "watch"}}
    config = yaml.safe_load(text)
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == [
        "alerts.example.internal:9093"
    ]


def test_the_servers_flags_are_the_packaged_servers(production: dict[str, Any]) -> None:
    text = render("prometheus.default.j2", {**production, "pair_metrics_retention": "45d"})
    (line,) = [line for line in text.splitlines() if line.startswith("ARGS=")]
    # systemd reads ARGS="..." from the file and splits $ARGS at whitespace.
    (value,) = shlex.split(line.removeprefix("ARGS="))
    args = value.split()
    assert "--storage.tsdb.retention.time=45d" in args
    assert "--web.console.templates=/etc/prometheus/consoles" in args
    assert "--web.console.libraries=/etc/prometheus/console_libraries" in args
    known = subprocess.run(
        [tool("prometheus"), "--help"], text=True, capture_output=True, timeout=60, check=False
    )
    flags = known.stdout + known.stderr
    for arg in args:
        assert f"{arg.split('=', 1)[0]}=" in flags, f"{arg}: not a flag of {tool('prometheus')}"
