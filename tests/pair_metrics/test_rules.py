"""pair_metrics' rules: promtool checks every rules file and runs every promtool test; each alert
has a test case where it fires and one where it stays quiet (an alert added without them fails
here), and says its severity, a summary and a description with what to do."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.pair_metrics.promql import rules
from tests.pair_metrics.render import RULES, promtool

TESTS = Path(__file__).parent / "promtool"
RULE_FILES = sorted(RULES.glob("*.yml"))
TEST_FILES = sorted(TESTS.glob("*_test.yml"))
ALERTS = [rule for rule in rules() if "alert" in rule]
SEVERITIES = {"warning", "critical"}


@functools.cache
def _test_cases() -> list[tuple[Path, dict[str, Any]]]:
    """(test file, alert_rule_test entry) for every alert test case."""
    cases = []
    for path in TEST_FILES:
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            cases.extend((path, case) for case in test.get("alert_rule_test") or [])
    return cases


def test_the_rules_and_their_tests_are_found() -> None:
    assert len(RULE_FILES) >= 5, RULE_FILES
    assert len(ALERTS) >= 16, [rule["alert"] for rule in ALERTS]
    assert TEST_FILES


def test_promtool_checks_every_rules_file() -> None:
    result = promtool("check", "rules", *RULE_FILES)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda path: path.name)
def test_promtool_tests_pass(path: Path) -> None:
    result = promtool("test", "rules", path.name, cwd=path.parent)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_rules_file_has_its_tests() -> None:
    tested = set()
    for path in TEST_FILES:
        for name in yaml.safe_load(path.read_text(encoding="utf-8"))["rule_files"]:
            rule_file = (path.parent / name).resolve()
            assert rule_file.is_file(), f"{path.name} names {name}, which is not there"
            tested.add(rule_file)
    assert {path.resolve() for path in RULE_FILES} <= tested


@pytest.mark.parametrize("alert", ALERTS, ids=lambda rule: rule["alert"])
def test_each_alert_fires_in_a_test_and_stays_quiet_in_another(alert: dict[str, Any]) -> None:
    cases = [case for _, case in _test_cases() if case["alertname"] == alert["alert"]]
    firing = [case for case in cases if case.get("exp_alerts")]
    quiet = [case for case in cases if not case.get("exp_alerts")]
    assert firing, f"{alert['alert']}: no promtool test case where it fires"
    assert quiet, f"{alert['alert']}: no promtool test case where it stays quiet (exp_alerts: [])"


def test_every_case_names_an_alert_that_exists() -> None:
    names = {alert["alert"] for alert in ALERTS}
    unknown = {f"{path.name}: {case['alertname']}" for path, case in _test_cases()}
    unknown = {entry for entry in unknown if entry.split(": ", 1)[1] not in names}
    assert not unknown, f"test cases of alerts no rules file has: {sorted(unknown)}"


@pytest.mark.parametrize("alert", ALERTS, ids=lambda rule: rule["alert"])
def test_each_alert_says_its_severity_which_pair_or_node_and_what_to_do(
    alert: dict[str, Any],
) -> None:
    assert alert.get("labels", {}).get("severity") in SEVERITIES, alert
    annotations = alert.get("annotations", {})
    summary, description = annotations.get("summary", ""), annotations.get("description", "")
    assert summary.strip() and description.strip(), alert
    for text in (summary, description):
        assert "$labels.node" in text or "$labels.pair" in text, f"{alert['alert']}: {text}"
    # The fix names something to run or to look at.
    fixes = ("playbooks/", "systemctl", "check", "Check", "Renew", "restart")
    assert any(word in description for word in fixes), description
