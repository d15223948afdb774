"""front_door_ctl.py on its own: what it reads from HAProxy's answers (samples recorded from
HAProxy 2.6 with the role's configuration: pair_one drained, pair_two failing its /v1/models
check), its command line, and how drain, restore and wait-up decide, on a scripted runtime API."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import front_door_ctl
import pytest
from front_door_ctl import CtlError, FrontDoor, PairState

SAMPLES = Path(__file__).parent / "samples"
SHOW_STAT = (SAMPLES / "show_stat.csv").read_text(encoding="utf-8")
SERVERS_STATE = (SAMPLES / "show_servers_state.txt").read_text(encoding="utf-8")


def test_the_recorded_stat_gives_each_pair_its_state_and_checks() -> None:
    states = front_door_ctl.pair_states(front_door_ctl.parse_stat(SHOW_STAT))
    assert list(states) == ["pair_one", "pair_three", "pair_two"]
    one, three, two = states.values()
    assert (one.status, one.health, one.check_status, one.check_code) == (
        "MAINT",
        "UP",
        "L7OK",
        "200",
    )
    assert (two.status, two.health, two.check_status, two.check_code) == (
        "DOWN",
        "DOWN",
        "L7STS",
        "401",
    )
    assert "comment: GET /v1/models with the pair's key" in two.last_check
    assert three.status == three.health == "UP"
    assert two.check_summary().startswith("DOWN, last check L7STS, code 401 (Unauthorized")


def test_an_answer_that_is_not_the_stat_csv_is_refused() -> None:
    with pytest.raises(CtlError, match="unexpected answer to 'show stat'"):
        front_door_ctl.parse_stat("Unknown command. Please enter one of the following...\n")


def test_a_check_in_progress_keeps_the_last_status() -> None:
    rows = front_door_ctl.parse_stat(SHOW_STAT.replace(",L7OK,200,", ",* L7OK,200,", 1))
    assert front_door_ctl.pair_states(rows)["pair_one"].check_status == "L7OK"


def stat(**pairs: dict[str, str]) -> str:
    """A `show stat` answer with the recorded columns: per pair, the client-facing server's
    and the checked server's fields."""
    header = SHOW_STAT.splitlines()[0][2:].split(",")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=header, lineterminator="\n")
    for name, fields in pairs.items():
        writer.writerow(
            {
                "pxname": "pairs",
                "svname": name,
                "status": fields.get("status", "UP"),
                "scur": fields.get("scur", "0"),
                "qcur": fields.get("qcur", "0"),
            }
        )
        writer.writerow(
            {
                "pxname": f"pair-{name}",
                "svname": name,
                "status": fields.get("health", "UP"),
                "check_status": fields.get("check_status", "L7OK"),
                "check_code": fields.get("check_code", "200"),
                "last_chk": fields.get("last_chk", ""),
            }
        )
    return "# " + ",".join(header) + "\n" + out.getvalue()


class ScriptedApi:
    """The runtime API: each `show stat` answers the next scripted stat (the last one repeats),
    `set server` answers `set_answer`; every command is kept."""

    def __init__(self, stats: list[str], set_answer: str = "\n") -> None:
        self.stats = iter(stats)
        self.last = stats[0]
        self.set_answer = set_answer
        self.commands: list[str] = []

    def __call__(self, socket_path: str, command: str, timeout: float = 5.0) -> str:
        self.commands.append(command)
        if command == "show stat":
            self.last = next(self.stats, self.last)
            return self.last
        if command == "show servers state":
            return SERVERS_STATE
        return self.set_answer


@pytest.fixture
def clock() -> Iterator[list[float]]:
    yield [0.0]


def scripted(
    monkeypatch: pytest.MonkeyPatch, clock: list[float], *stats: str, set_answer: str = "\n"
) -> tuple[FrontDoor, ScriptedApi]:
    api = ScriptedApi(list(stats), set_answer)
    monkeypatch.setattr(front_door_ctl, "runtime_command", api)

    def sleep(seconds: float) -> None:
        clock[0] += seconds

    return FrontDoor("/run/test.sock", clock=lambda: clock[0], sleep=sleep), api


def test_drain_sets_maintenance_and_waits_until_nothing_is_in_flight(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    door, api = scripted(
        monkeypatch,
        clock,
        stat(p={"status": "UP", "scur": "2"}),
        stat(p={"status": "MAINT", "scur": "2"}),
        stat(p={"status": "MAINT", "scur": "1", "qcur": "1"}),
        stat(p={"status": "MAINT", "scur": "0"}),
    )
    message = front_door_ctl.drain(door, "p", timeout=10, interval=1)
    assert api.commands.count("set server pairs/p state maint") == 1
    assert message == "p: drained, no request in flight (waited 1.0 s)"


def test_drain_that_times_out_says_how_many_are_in_flight(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    door, _ = scripted(monkeypatch, clock, stat(p={"status": "MAINT", "scur": "3", "qcur": "1"}))
    with pytest.raises(CtlError) as raised:
        front_door_ctl.drain(door, "p", timeout=5, interval=1)
    assert str(raised.value).startswith(
        "p: 4 request(s) still in flight after 5 s (3 running, 1 queued); it stays in maintenance"
    )
    assert clock[0] == pytest.approx(5)


def test_restore_waits_for_up_and_fails_with_the_checks(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    down = {"status": "DOWN", "health": "DOWN", "check_status": "L4CON", "check_code": ""}
    door, api = scripted(
        monkeypatch, clock, stat(p={**down, "status": "MAINT", "last_chk": "Connection refused"})
    )
    with pytest.raises(CtlError, match=r"p: not UP after 3 s \(client-facing MAINT; its checks: "):
        front_door_ctl.restore(door, "p", timeout=3, interval=1)
    assert "set server pairs/p state ready" in api.commands
    door, _ = scripted(
        monkeypatch, clock, stat(p={"status": "MAINT"}), stat(p={**down}), stat(p={})
    )
    assert front_door_ctl.restore(door, "p", timeout=30, interval=1).startswith(
        "p: UP and taking requests"
    )


def test_wait_up_reads_the_checked_server_not_the_drain(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    door, api = scripted(monkeypatch, clock, stat(p={"status": "MAINT", "health": "UP"}))
    assert front_door_ctl.wait_up(door, "p", timeout=5, interval=1).startswith("p: checks pass")
    assert not [c for c in api.commands if c.startswith("set ")]


def test_a_refused_command_and_an_unknown_pair_are_errors(
    monkeypatch: pytest.MonkeyPatch, clock: list[float]
) -> None:
    door, _ = scripted(monkeypatch, clock, stat(p={}), set_answer="No such server.\n")
    with pytest.raises(CtlError, match=r"HAProxy refused to set p maint: No such server\."):
        door.set_state("p", "maint")
    with pytest.raises(CtlError, match=r"no pair 'q' at the front door \(pairs: p\)"):
        door.state("q")


def test_save_state_writes_the_whole_answer_then_renames(
    monkeypatch: pytest.MonkeyPatch, clock: list[float], tmp_path: Path
) -> None:
    door, _ = scripted(monkeypatch, clock, stat(p={}))
    target = tmp_path / "front_door.state"
    assert front_door_ctl.save_state(door, target) == f"saved the state of 6 server(s) to {target}"
    assert target.read_text() == SERVERS_STATE
    assert not list(tmp_path.glob("*.tmp"))


def test_the_command_line() -> None:
    parser = front_door_ctl._parser()
    args = parser.parse_args(["drain", "pair_one"])
    assert (args.socket, args.pair, args.timeout, args.interval) == (
        "/run/haproxy/admin.sock",
        "pair_one",
        300.0,
        0.5,
    )
    args = parser.parse_args(["--socket", "/s", "restore", "p", "--timeout", "7"])
    assert (args.command, args.socket, args.timeout) == ("restore", "/s", 7.0)
    assert parser.parse_args(["wait-up", "p"]).timeout == 120.0
    args = parser.parse_args(["probe", "--address", "::1", "--port", "8443", "--server-name", "d"])
    assert (args.cafile, args.path, args.key_env) == ("", "/v1/models", "")
    for wrong in (["drain"], ["drain", "p", "--timeout", "soon"], ["probe", "--port", "1"], []):
        with pytest.raises(SystemExit) as exited:
            parser.parse_args(wrong)
        assert exited.value.code == 2


def test_an_unreachable_front_door_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert front_door_ctl.main(["--socket", str(tmp_path / "none.sock"), "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("front_door_ctl status: cannot reach HAProxy's runtime API at ")
    assert err.count("\n") == 1


def test_a_pair_state_counts_running_and_queued() -> None:
    state = PairState("p", "MAINT", 2, 1, "UP", "L7OK", "200", "", 3)
    assert state.in_flight == 3
