"""The lab's vLLM stand-in behaves like a two-node vLLM where the roles depend on it."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_standin import cli, plugins

from tests.service.standin_pair import Pair, fake_plugin


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    started = Pair(tmp_path, fake_plugin(tmp_path / "overlay"), {"STANDIN_COMPLETION": " 4"})
    yield started
    started.stop()


def completion(pair: Pair, prompt: str = "2+2=") -> tuple[int, dict[str, Any]]:
    return pair.call("/v1/completions", {"model": "test-model", "prompt": prompt, "max_tokens": 4})


def test_pair_serves_through_both_ranks(pair: Pair) -> None:
    pair.start(1)
    pair.start(0)
    pair.wait_ready()
    status, body = completion(pair)
    assert status == 200, body
    assert body["choices"][0]["text"] == " 4"
    assert body["standin"]["ranks"] == [0, 1]
    assert pair.call("/v1/models", key="wrong")[0] == 401
    assert completion(pair)[1]["id"] == body["id"], "answers must be deterministic"
    status, body = pair.call("/v1/completions", {"model": "other", "prompt": "x"})
    assert status == 404


def test_both_ranks_load_and_call_the_plugin(pair: Pair) -> None:
    pair.start(1, {"VLLM_PLUGINS": "dualpath"})
    pair.start(0, {"VLLM_PLUGINS": "dualpath"})
    pair.wait_ready()
    status, body = pair.call("/standin/plugins")
    assert status == 200
    for rank in ("0", "1"):
        (report,) = body["ranks"][rank]
        assert report["name"] == "dualpath"
        assert report["status"] == "called"
        assert report["version"] == "1.2.3"
        assert report["location"].startswith(str(pair.workdir / "overlay"))
    assert "fake plugin registered" in pair.ranks[0].output()


def test_losing_rank1_kills_rank0(pair: Pair) -> None:
    rank1 = pair.start(1)
    rank0 = pair.start(0)
    pair.wait_ready()
    rank1.proc.send_signal(signal.SIGTERM)
    assert rank1.proc.wait(timeout=10) == 0
    assert rank0.proc.wait(timeout=10) == 1
    assert "tensor-parallel group broken" in rank0.output()


def sigterm_during_a_request(
    pair: Pair, serve_args: list[str]
) -> tuple[list[int | BaseException], float]:
    """Start the pair, send one request, SIGTERM rank 0 while it runs; wait for rank 0 to end.

    Returns what the request got (a status, or the error the client saw) and how long rank 0
    took to exit after SIGTERM.
    """
    pair.start(1)
    rank0 = pair.start(0, serve_args=serve_args)
    pair.wait_ready()
    got: list[int | BaseException] = []

    def send() -> None:
        try:
            got.append(completion(pair)[0])
        except OSError as exc:  # closed without an answer
            got.append(exc)

    worker = threading.Thread(target=send)
    worker.start()
    time.sleep(0.5)  # admitted and generating (STANDIN_COMPLETION_DELAY_S)
    signalled = time.monotonic()
    rank0.proc.send_signal(signal.SIGTERM)
    assert rank0.proc.wait(timeout=20) == 0, rank0.output()
    took = time.monotonic() - signalled
    worker.join(timeout=10)
    assert pair.ranks[1].proc.wait(timeout=10) == 0, "a clean shutdown of rank 0 ends rank 1"
    return got, took


def test_sigterm_without_shutdown_timeout_aborts_the_request_in_flight(tmp_path: Path) -> None:
    # vLLM's default --shutdown-timeout 0: the engine aborts what it runs, the process exits.
    pair = Pair(tmp_path, None, {"STANDIN_COMPLETION_DELAY_S": "5"})
    try:
        got, took = sigterm_during_a_request(pair, [])
        (outcome,) = got
        assert isinstance(outcome, OSError), f"the request in flight was answered: {outcome}"
        assert took < 3, f"rank 0 took {took:.1f} s to exit: it waited for the request"
        assert "mode=abort" in pair.ranks[0].output()
    finally:
        pair.stop()


def test_sigterm_with_shutdown_timeout_drains_the_request_in_flight(tmp_path: Path) -> None:
    pair = Pair(tmp_path, None, {"STANDIN_COMPLETION_DELAY_S": "3"})
    try:
        pair.start(1)
        rank0 = pair.start(0, serve_args=["--shutdown-timeout", "20"])
        pair.wait_ready()
        answers: list[tuple[int, dict[str, Any]]] = []
        worker = threading.Thread(target=lambda: answers.append(completion(pair)))
        worker.start()
        time.sleep(0.5)
        rank0.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        # Draining, as vLLM: still listening and healthy; new work is finished as aborted.
        assert pair.call("/health")[0] == 200
        status, late = completion(pair, "a late request")
        assert status == 200, late
        assert late["choices"][0]["finish_reason"] == "abort"
        assert late["choices"][0]["text"] == ""
        worker.join(timeout=10)
        ((status, body),) = answers
        assert status == 200, "the request in flight at SIGTERM must be answered"
        assert body["choices"][0]["finish_reason"] == "length"
        assert rank0.proc.wait(timeout=10) == 0
        assert pair.ranks[1].proc.wait(timeout=10) == 0
        with pytest.raises(OSError):  # and gone once drained
            completion(pair)
    finally:
        pair.stop()


def test_drain_is_bounded_by_the_shutdown_timeout(tmp_path: Path) -> None:
    pair = Pair(tmp_path, None, {"STANDIN_COMPLETION_DELAY_S": "8"})
    try:
        got, took = sigterm_during_a_request(pair, ["--shutdown-timeout", "1"])
        (outcome,) = got
        assert isinstance(outcome, OSError), f"a request past the timeout was answered: {outcome}"
        assert 1 <= took < 4, f"rank 0 exited {took:.1f} s after SIGTERM, not ~1 s"
        assert "mode=drain timeout=1s" in pair.ranks[0].output()
    finally:
        pair.stop()


def test_rank1_waits_for_rank0_then_times_out(tmp_path: Path) -> None:
    pair = Pair(tmp_path, None, {"STANDIN_RENDEZVOUS_TIMEOUT_S": "1"})
    try:
        rank1 = pair.start(1)
        assert rank1.proc.wait(timeout=10) == 1
        assert "RendezvousError" in rank1.output()
    finally:
        pair.stop()


def test_injected_load_failure(tmp_path: Path) -> None:
    pair = Pair(tmp_path, None, {"STANDIN_FAIL": "load"})
    try:
        rank0 = pair.start(0)
        assert rank0.proc.wait(timeout=10) == 1
        assert "STANDIN_FAIL=load" in rank0.output()
    finally:
        pair.stop()


def test_register_that_raises_stops_the_node(tmp_path: Path) -> None:
    overlay = fake_plugin(tmp_path / "overlay")
    init = overlay / "fakeplugin/__init__.py"
    init.write_text("def register():\n    raise RuntimeError('boom')\n", encoding="utf-8")
    pair = Pair(tmp_path, overlay, {})
    try:
        rank0 = pair.start(0)
        assert rank0.proc.wait(timeout=10) == 1
        assert "boom" in rank0.output()
    finally:
        pair.stop()


def test_plugin_filter_and_import_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    overlay = fake_plugin(tmp_path / "overlay", body="import no_such_module_anywhere")
    monkeypatch.syspath_prepend(str(overlay))
    reports = plugins.load_general_plugins({"VLLM_PLUGINS": "dualpath"})
    mine = [r for r in reports if r["distribution"] == "fakeplugin"]
    assert [r["status"] for r in mine] == ["load_failed"]
    assert "no_such_module_anywhere" in mine[0]["error"]
    reports = plugins.load_general_plugins({"VLLM_PLUGINS": "someotherplugin"})
    assert [r["status"] for r in reports if r["distribution"] == "fakeplugin"] == ["not_allowed"]


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--nnodes", "2", "--node-rank", "1"], "--headless"),
        (["--nnodes", "2", "--node-rank", "0", "--headless"], "cannot be --headless"),
        (["--nnodes", "2", "--node-rank", "2", "--headless"], "outside"),
        (["--nnodes", "2", "--tensor-parallel-size", "3"], "does not split"),
    ],
)
def test_topology_errors(argv: list[str], problem: str) -> None:
    args = cli.parser().parse_args(["serve", "/m", "--tensor-parallel-size", "2", *argv])
    assert problem in cli.check_topology(args)


def test_unknown_serve_option_is_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse(["serve", "/m", "--max-model-length", "10"])
    assert exited.value.code == 2  # argparse's, as vLLM's (test_standin_cli.py compares them)
    assert "vllm: error: unrecognized arguments: --max-model-length 10" in capsys.readouterr().err


def test_sigterm_while_waiting_for_the_peer_exits_at_once(tmp_path: Path) -> None:
    pair = Pair(tmp_path, None, {})
    try:
        rank0 = pair.start(0)
        threading.Event().wait(1.0)  # loaded, now waiting for rank 1 (rendezvous timeout 20 s)
        assert rank0.proc.poll() is None
        rank0.proc.send_signal(signal.SIGTERM)
        assert rank0.proc.wait(timeout=3) == 0
    finally:
        pair.stop()


def test_unknown_vllm_variable_warns_or_fails_as_vllm(tmp_path: Path) -> None:
    pair = Pair(tmp_path, None, {"VLLM_NO_SUCH_THING": "1"})
    warning = "Unknown vLLM environment variable detected: VLLM_NO_SUCH_THING"
    try:
        rank1 = pair.start(1)  # warns, then waits for rank 0
        deadline = time.monotonic() + 10
        while warning not in rank1.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert warning in rank1.output()
        assert rank1.proc.poll() is None
        rank0 = pair.start(0, serve_args=["--fail-on-environ-validation"])
        assert rank0.proc.wait(timeout=10) == 1
        assert f"ValueError: {warning}" in rank0.output()
    finally:
        pair.stop()
