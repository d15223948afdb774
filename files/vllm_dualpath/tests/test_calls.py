"""Per-path call counts: what the op records, the stats files, the log lines, the reader."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from fp8_cases import Case, build
from vllm_dualpath import ahead, calibration, calls, op, scratch, settings

SRC = Path(__file__).resolve().parents[1] / "src"
LOGGER = "vllm.dualpath"


@pytest.fixture(autouse=True)
def fresh_counts():
    calls.reset()
    calls.configure(None, settings.DEFAULT_REPORT_INTERVAL_S)
    yield
    calls.reset()
    calls.configure(None, settings.DEFAULT_REPORT_INTERVAL_S)


CASE = Case(64, 128, "channel")


def _call(m: int, dtype: torch.dtype = torch.bfloat16, case: Case = CASE):
    _, packed, stored, _ = build(case)
    x = torch.randn(m, case.size_k, generator=torch.Generator().manual_seed(m)).to(dtype)
    return torch.ops.dualpath.fp8_marlin_linear(
        x, packed, stored, None, case.size_n, case.size_k, None, True
    )


def _run_python(code: str, *args: str, env: dict[str, str] | None = None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DUALPATH_")}
    environment["PYTHONPATH"] = str(SRC)
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, *(["-c", textwrap.dedent(code)] if code else []), *args],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


# --- what the op counts -------------------------------------------------------------------------


@pytest.mark.interpreter
def test_small_m_counts_marlin_and_large_m_counts_unpack(marlin):
    for m in (1, 20):
        _call(m)
    for _ in range(3):
        _call(1024)  # unpack ahead (the default from M = 1024)
    assert calls.snapshot() == {"marlin": 2, "unpack": 3}
    assert marlin.calls == [1, 20]
    prefetches = ahead.for_device(torch.device("cpu")).stats
    assert prefetches.hits + prefetches.misses == 3


@pytest.mark.interpreter
def test_in_line_unpack_counts_unpack(marlin):
    op.configure(settings.load({"DUALPATH_UNPACK_AHEAD": "0"}), None)
    _call(1024)
    table = calibration.parse({"format": 1, "shapes": [{"n": 64, "k": 128, "unpack_from_m": 100}]})
    op.configure(settings.load({}), table)
    _call(100)  # the table's unpack below the ahead threshold: in line
    assert calls.snapshot() == {"marlin": 0, "unpack": 2}
    assert marlin.calls == []
    assert ahead.for_device(torch.device("cpu")).stats.misses == 0


@pytest.mark.interpreter
def test_fp16_input_at_large_m_counts_marlin(marlin):
    _call(2048, dtype=torch.float16)
    assert calls.snapshot() == {"marlin": 1, "unpack": 0}
    assert marlin.calls == [2048]


@pytest.mark.interpreter
def test_capture_without_scratch_counts_marlin(marlin, monkeypatch):
    op.configure(settings.load({"DUALPATH_UNPACK_AHEAD": "0"}), None)
    monkeypatch.setattr(scratch, "capturing", lambda device: True)
    _call(2048)
    assert calls.snapshot() == {"marlin": 1, "unpack": 0}
    assert marlin.calls == [2048]


@pytest.mark.interpreter
def test_a_failed_marlin_call_is_not_counted(marlin):
    op.install_marlin_apply(None)
    with pytest.raises(RuntimeError, match="no Marlin apply installed"):
        _call(1)
    assert calls.snapshot() == {"marlin": 0, "unpack": 0}


@pytest.mark.interpreter
def test_the_op_passes_its_settings_to_the_reporter(marlin, tmp_path):
    op.configure(settings.load({"DUALPATH_STATS_DIR": str(tmp_path)}), None)
    _call(1)
    reporter = calls.reporter()
    assert reporter is not None
    reporter.step()
    (written,) = tmp_path.glob("*.json")
    assert json.loads(written.read_text())["calls"] == {"marlin": 1, "unpack": 0}


# --- the first-call line ------------------------------------------------------------------------


def test_the_first_call_of_each_path_logs_one_line(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    calls.record("unpack", 2048, 5120, 12288)
    calls.record("unpack", 4096, 5120, 12288)
    calls.record("marlin", 3, 5120, 12288)
    calls.record("marlin", 4, 5120, 12288)
    lines = [r.getMessage() for r in caplog.records if "first call" in r.getMessage()]
    pid = os.getpid()
    assert lines == [
        f"vllm-dualpath: first call on the unpack path (M=2048, 5120x12288) in pid {pid}",
        f"vllm-dualpath: first call on the marlin path (M=3, 5120x12288) in pid {pid}",
    ]
    assert calls.snapshot() == {"marlin": 2, "unpack": 2}


def test_the_reporter_starts_with_the_first_call_only():
    assert calls.reporter() is None
    calls.record("marlin", 1, 64, 128)
    first = calls.reporter()
    assert first is not None
    calls.record("unpack", 2048, 64, 128)
    assert calls.reporter() is first


def test_counts_from_many_threads_add_up():
    import threading

    def work() -> None:
        for _ in range(1000):
            calls.record("marlin", 1, 64, 128)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls.snapshot()["marlin"] == 4000


# --- the stats file -----------------------------------------------------------------------------


def _only_file(directory: Path) -> dict:
    files = list(directory.glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_the_stats_file_holds_this_processs_counts(tmp_path):
    stats_dir = tmp_path / "created" / "by the reporter"
    calls.configure(stats_dir, 60)
    for _ in range(3):
        calls.record("marlin", 1, 64, 128)
    calls.record("unpack", 2048, 64, 128)
    reporter = calls.Reporter()
    before = time.time()
    reporter.step()
    written = stats_dir / f"{socket.gethostname()}-{os.getpid()}.json"
    assert [p.name for p in stats_dir.iterdir()] == [written.name]  # no temporary left behind
    content = json.loads(written.read_text())
    assert set(content) == {"pid", "host", "process", "calls", "updated", "final"}
    assert content["pid"] == os.getpid() and content["host"] == socket.gethostname()
    assert content["calls"] == {"marlin": 3, "unpack": 1}
    assert content["final"] is False
    assert before <= content["updated"] <= time.time()
    assert isinstance(content["process"], str) and content["process"]


def test_the_file_is_rewritten_only_when_the_counts_change(tmp_path, monkeypatch):
    calls.configure(tmp_path, 60)
    calls.record("marlin", 1, 64, 128)
    reporter = calls.Reporter()
    writes: list[str] = []
    real_write = calls.write_atomically

    def counted_write(target: Path, text: str) -> None:
        writes.append(text)
        real_write(target, text)

    monkeypatch.setattr(calls, "write_atomically", counted_write)
    reporter.step()
    reporter.step()
    assert len(writes) == 1
    calls.record("marlin", 1, 64, 128)
    reporter.step()
    assert len(writes) == 2
    assert _only_file(tmp_path)["calls"] == {"marlin": 2, "unpack": 0}


def test_a_write_replaces_the_file_in_one_step(tmp_path, monkeypatch):
    """The new content goes to a temporary file readers do not glob, then replaces the old file;
    a write that fails half-way leaves the old file whole and no temporary."""
    target = tmp_path / "host-1.json"
    calls.write_atomically(target, '{"old": true}')
    seen: list[tuple[Path, Path]] = []
    real_replace = Path.replace

    def replace(self: Path, other: Path) -> Path:
        seen.append((self, Path(other)))
        assert json.loads(target.read_text()) == {"old": True}  # untouched until the rename
        assert self.parent == tmp_path and not self.match("*.json")
        return real_replace(self, other)

    monkeypatch.setattr(Path, "replace", replace)
    calls.write_atomically(target, '{"new": true}')
    assert seen and seen[0][1] == target
    assert json.loads(target.read_text()) == {"new": True}

    def failing_replace(self: Path, other: Path) -> Path:
        raise OSError("disk full")

    monkeypatch.setattr(Path, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        calls.write_atomically(target, '{"newer": true}')
    assert json.loads(target.read_text()) == {"new": True}
    assert [p.name for p in tmp_path.iterdir()] == ["host-1.json"]


def test_no_file_without_a_stats_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    written: list[Path] = []
    monkeypatch.setattr(calls, "write_atomically", lambda target, text: written.append(target))
    calls.record("unpack", 2048, 64, 128)
    reporter = calls.Reporter()
    reporter.step()
    reporter.finish()
    assert written == []
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_stats_dir_warns_once_and_counting_goes_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    blocker = tmp_path / "a file"
    blocker.write_text("")
    calls.configure(blocker / "stats", 1)  # a directory under a file: cannot be made, even by root
    calls.record("marlin", 1, 64, 128)
    reporter = calls.Reporter(clock=lambda: 0.0)
    reporter.step(now=0.0)
    calls.record("marlin", 1, 64, 128)
    reporter.step(now=5.0)
    reporter.finish()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "cannot write call counts" in warnings[0].getMessage()
    assert str(blocker / "stats") in warnings[0].getMessage()
    assert calls.snapshot() == {"marlin": 2, "unpack": 0}
    messages = [r.getMessage() for r in caplog.records]
    assert any("marlin=2" in message for message in messages)  # still logged


def test_the_reporter_thread_writes_within_a_tick(tmp_path, monkeypatch):
    monkeypatch.setattr(calls, "TICK_S", 0.02)
    calls.configure(tmp_path, 60)
    calls.record("unpack", 2048, 64, 128)
    deadline = time.monotonic() + 5.0  # a loaded machine; normally a few ticks
    while not list(tmp_path.glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _only_file(tmp_path)["calls"] == {"marlin": 0, "unpack": 1}
    calls.record("unpack", 2048, 64, 128)
    deadline = time.monotonic() + 5.0  # a loaded machine; normally a few ticks
    while _only_file(tmp_path)["calls"]["unpack"] != 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _only_file(tmp_path)["calls"] == {"marlin": 0, "unpack": 2}


# --- the periodic line --------------------------------------------------------------------------


def _count_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "calls in pid" in r.getMessage()]


def test_the_periodic_line_honours_the_interval(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    calls.configure(None, 10)
    reporter = calls.Reporter(clock=lambda: 100.0)
    calls.record("marlin", 1, 64, 128)
    reporter.step(now=105.0)
    assert _count_lines(caplog) == []  # the interval has not passed
    reporter.step(now=110.0)
    assert _count_lines(caplog) == [f"vllm-dualpath: calls in pid {os.getpid()}: marlin=1 unpack=0"]
    reporter.step(now=125.0)
    assert len(_count_lines(caplog)) == 1  # nothing changed since
    calls.record("unpack", 2048, 64, 128)
    reporter.step(now=126.0)  # changed, and 16 s since the last line
    reporter.step(now=127.0)
    calls.record("unpack", 2048, 64, 128)
    reporter.step(now=130.0)  # changed, but only 4 s since the last line
    assert _count_lines(caplog)[1:] == [
        f"vllm-dualpath: calls in pid {os.getpid()}: marlin=1 unpack=1"
    ]
    reporter.step(now=136.0)
    assert _count_lines(caplog)[2:] == [
        f"vllm-dualpath: calls in pid {os.getpid()}: marlin=1 unpack=2"
    ]


def test_an_interval_of_zero_logs_no_periodic_line(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    calls.configure(None, 0)
    reporter = calls.Reporter(clock=lambda: 0.0)
    calls.record("marlin", 1, 64, 128)
    for now in (1.0, 100.0, 10_000.0):
        reporter.step(now=now)
    assert _count_lines(caplog) == []


# --- at exit ------------------------------------------------------------------------------------


def test_the_exit_hook_writes_the_final_file_and_logs_the_totals_once(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    calls.configure(tmp_path, 60)
    calls.record("marlin", 1, 64, 128)
    calls.record("unpack", 2048, 64, 128)
    calls.report_at_exit()
    calls.report_at_exit()
    content = _only_file(tmp_path)
    assert content["final"] is True and content["calls"] == {"marlin": 1, "unpack": 1}
    assert _count_lines(caplog) == [
        f"vllm-dualpath: calls in pid {os.getpid()} at exit: marlin=1 unpack=1"
    ]
    reporter = calls.reporter()
    assert reporter is not None
    calls.record("marlin", 1, 64, 128)
    reporter.step()  # after the final write nothing overwrites it
    assert _only_file(tmp_path)["final"] is True


def test_without_calls_the_exit_hook_does_nothing(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    calls.configure(tmp_path, 60)
    calls.report_at_exit()
    assert calls.reporter() is None
    assert list(tmp_path.iterdir()) == []
    assert _count_lines(caplog) == []


def test_a_process_writes_its_final_file_when_it_exits(tmp_path):
    result = _run_python(
        f"""
        import logging
        from pathlib import Path
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        from vllm_dualpath import calls
        calls.configure(Path({str(tmp_path)!r}), 60)
        calls.record("unpack", 2048, 5120, 12288)
        calls.record("unpack", 2048, 5120, 12288)
        calls.record("marlin", 1, 5120, 12288)
        """
    )
    assert result.returncode == 0, result.stderr
    content = _only_file(tmp_path)
    assert content["final"] is True
    assert content["calls"] == {"marlin": 1, "unpack": 2}
    assert content["pid"] != os.getpid()
    assert "at exit: marlin=1 unpack=2" in result.stderr
    assert "first call on the unpack path (M=2048, 5120x12288)" in result.stderr


def test_a_forked_child_counts_from_zero():
    result = _run_python(
        """
        import json, os
        from vllm_dualpath import calls
        calls.record("marlin", 1, 64, 128)
        read, write = os.pipe()
        if os.fork() == 0:
            calls.record("unpack", 2048, 64, 128)
            os.write(write, json.dumps(calls.snapshot()).encode())
            os._exit(0)
        os.wait()
        print(json.dumps({"child": json.loads(os.read(read, 1000)), "parent": calls.snapshot()}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "child": {"marlin": 0, "unpack": 1},
        "parent": {"marlin": 1, "unpack": 0},
    }


# --- reading a directory ------------------------------------------------------------------------


def _stats(pid: int, marlin: int, unpack: int) -> str:
    return json.dumps(
        {
            "pid": pid,
            "host": "spark-a",
            "process": "VllmWorker-0",
            "calls": {"marlin": marlin, "unpack": unpack},
            "updated": 1.0,
            "final": False,
        }
    )


def test_read_stats_dir_sums_the_files_and_skips_broken_ones(tmp_path):
    (tmp_path / "spark-a-1.json").write_text(_stats(1, 10, 2))
    (tmp_path / "spark-b-2.json").write_text(_stats(2, 5, 7))
    (tmp_path / "spark-a-3.json").write_text(_stats(3, 1, 1)[:20])  # a partial copy
    (tmp_path / "spark-a-4.json").write_text(json.dumps({"calls": {"marlin": "many"}}))
    (tmp_path / "spark-a-5.json").write_bytes(b"\xff\xfe")
    (tmp_path / ".spark-a-6.json.1.tmp").write_text(_stats(6, 100, 100))
    (tmp_path / "notes.txt").write_text(_stats(7, 100, 100))
    assert calls.read_stats_dir(tmp_path) == {"marlin": 15, "unpack": 9, "processes": 2}


def test_read_stats_dir_reads_what_the_reporter_writes(tmp_path):
    calls.configure(tmp_path, 60)
    calls.record("unpack", 2048, 64, 128)
    calls.Reporter().step()
    (tmp_path / "spark-b-2.json").write_text(_stats(2, 5, 7))
    assert calls.read_stats_dir(str(tmp_path)) == {"marlin": 5, "unpack": 8, "processes": 2}


def test_the_command_line_prints_the_sums(tmp_path):
    (tmp_path / "spark-a-1.json").write_text(_stats(1, 10, 2))
    (tmp_path / "spark-b-2.json").write_text(_stats(2, 5, 7))
    result = _run_python("", "-m", "vllm_dualpath.calls", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"marlin": 15, "unpack": 9, "processes": 2}


def test_the_command_line_refuses_a_missing_directory(tmp_path, capsys):
    assert calls.main([str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert calls.main([]) == 2
    assert "usage" in capsys.readouterr().err
