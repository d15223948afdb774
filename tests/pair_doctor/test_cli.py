"""The doctor's command line: JSON in, findings (errors first), counts and text out."""

from __future__ import annotations

import io
import json

import pytest

from tests.pair_doctor.healthy_pair import healthy_pair
from tools.pair_doctor.__main__ import main, run


def test_findings_sorted_errors_first_with_counts() -> None:
    pair = healthy_pair()
    pair["spark-02"]["interfaces"]["enp1s0f1np1"]["mtu"] = 1500
    result = run({"observations": pair, "expectations": {"rail_mtu": 9000}})
    assert result["findings"][0]["severity"] == "error"
    assert result["findings"][0]["check"] == "mtu_mismatch"
    assert result["counts"]["error"] == 1
    assert result["counts"]["warning"] == 0
    assert result["text"][0].startswith("[ERROR] mtu_mismatch (pair): enp1s0f1np1 MTU differs")
    assert result["text"][1].startswith("    fix: re-run playbooks/network.yml")


def test_only_runs_the_named_checks() -> None:
    result = run({"observations": healthy_pair(), "only": ["cma"]})
    assert {f["check"] for f in result["findings"]} == {"cma"}


@pytest.mark.parametrize(
    "request_body",
    [
        {"observations": {}, "only": ["no_such_check"]},
        {"observations": {}, "expectations": {"rail_mut": 9000}},
        {"expectations": {}},
    ],
)
def test_bad_requests_exit_2(
    request_body: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(request_body)))
    assert main() == 2
    assert "error" in json.loads(capsys.readouterr().out)


def test_main_prints_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"observations": healthy_pair()})))
    assert main() == 0
    assert json.loads(capsys.readouterr().out)["counts"]["error"] == 0
